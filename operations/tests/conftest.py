from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal

import pytest

from dev.providers.local_openai import LocalResponsesServer
from operations import billing, moves
from operations.models import Operation, Wallet

API_KEY = "test-backend-key"


@pytest.fixture(autouse=True)
def billing_checked_after_every_transition(monkeypatch):
    """Every operation transition in these tests is followed by the billing invariants."""
    original = moves.operation_transition

    def checked(**kwargs):
        operation = original(**kwargs)
        fresh = Operation.objects.get(pk=operation.pk)
        assert billing.invariants(fresh) == [], (fresh.state, billing.invariants(fresh))
        wallet = Wallet.objects.get(owner=fresh.owner)
        assert billing.wallet_invariants(wallet) == []
        return operation

    # Every caller goes through operations.moves, so this wraps them all.
    monkeypatch.setattr(moves, "operation_transition", checked)


@contextmanager
def local_backend(
    settings, *, work_seconds: float, timeout: float | None = None
) -> Iterator[LocalResponsesServer]:
    """The local Responses backend, its work done after `work_seconds`, as the settings'
    backend (`timeout`: the client's, when given); polled as soon as due."""
    with LocalResponsesServer(api_key=API_KEY, work_seconds=work_seconds) as server:
        settings.OPERATIONS_BACKEND_URL = server.url
        settings.OPERATIONS_BACKEND_API_KEY = API_KEY
        if timeout is not None:
            settings.OPERATIONS_BACKEND_TIMEOUT_SECONDS = timeout
        settings.OPERATIONS_POLL_SECONDS = 0.0
        yield server


@pytest.fixture
def backend_server(settings):
    with local_backend(settings, work_seconds=0.3, timeout=1.0) as server:
        yield server


@pytest.fixture
def funded(user):
    billing.wallet_grant(owner=user, amount=Decimal("100"), note="test grant")
    return user


@pytest.fixture
def ops_token(user, application, make_token):
    return make_token(user, application, scope="operations:read operations:write")


@pytest.fixture
def api(api_client):
    """`api("get" | "post", path under /api/v1/, token, body)` on the root `api_client`."""

    def call(method: str, path: str, token, body=None):
        return getattr(api_client, method)(f"/api/v1/{path}", token, body)

    return call
