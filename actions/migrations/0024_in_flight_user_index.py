from django.db import migrations, models

from core.migration_operations import AddIndexConcurrentlyOnPostgres

IN_FLIGHT = models.Q(("status__in", ["signed", "submitted", "broadcast"]))


class Migration(migrations.Migration):
    # The console's needs-attention list filtered by owner reads the owner's actions stuck in
    # flight oldest change first, not every in-flight action filtered by owner.
    atomic = False

    dependencies = [("actions", "0023_in_flight_updated_index")]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="action",
            index=models.Index(
                fields=["user", "updated_at"],
                name="action_in_flight_user_updated",
                condition=IN_FLIGHT,
            ),
        ),
    ]
