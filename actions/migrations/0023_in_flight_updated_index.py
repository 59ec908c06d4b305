from django.db import migrations, models

from core.migration_operations import AddIndexConcurrentlyOnPostgres

IN_FLIGHT = models.Q(("status__in", ["signed", "submitted", "broadcast"]))


class Migration(migrations.Migration):
    # The console's needs-attention list reads the actions stuck in flight oldest change first,
    # up to its limit: on (status, updated_at) the three in-flight statuses came out of order,
    # so every in-flight action was read and sorted (its page grew with the table).
    atomic = False

    dependencies = [("actions", "0022_list_order_indexes")]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="action",
            index=models.Index(
                fields=["updated_at"], name="action_in_flight_updated", condition=IN_FLIGHT
            ),
        ),
    ]
