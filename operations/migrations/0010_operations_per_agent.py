"""Operations are per agent: idempotency keys are scoped to (owner, application, key).

Existing rows keep the application they were started by (the API has always stored it), so
each stays its agent's. A row without one (none is made so through the API) stays visible to
staff but to no agent. The old key constraint was stricter than the new
ones, so every existing row satisfies them: nothing to backfill.
"""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("operations", "0009_operation_max_output_tokens_write_off"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        migrations.swappable_dependency(settings.OAUTH2_PROVIDER_APPLICATION_MODEL),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="operation",
            name="operation_idempotency_key_unique",
        ),
        migrations.AddConstraint(
            model_name="operation",
            constraint=models.UniqueConstraint(
                condition=models.Q(
                    ("application__isnull", False), ("idempotency_key__isnull", False)
                ),
                fields=("owner", "application", "idempotency_key"),
                name="operation_idempotency_key_agent",
            ),
        ),
        migrations.AddConstraint(
            model_name="operation",
            constraint=models.UniqueConstraint(
                condition=models.Q(
                    ("application__isnull", True), ("idempotency_key__isnull", False)
                ),
                fields=("owner", "idempotency_key"),
                name="operation_idempotency_key_no_agent",
            ),
        ),
    ]
