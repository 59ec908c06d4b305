from messaging.tests.conftest import (  # noqa: F401 - shared fixtures (test_metrics)
    member,
    queue,
    social_account,
    workspace,
    x_server,
)
