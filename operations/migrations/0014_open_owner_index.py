from django.db import migrations, models

from core.migration_operations import AddIndexConcurrentlyOnPostgres

UNFINISHED = ~models.Q(("state__in", ["succeeded", "failed", "cancelled"]))


class Migration(migrations.Migration):
    # The console's needs-attention list filtered by owner reads the owner's unfinished
    # operations oldest change first, instead of AND-ing all of the owner's operations with
    # every unfinished one (both grew with the table).
    atomic = False

    dependencies = [("operations", "0013_open_indexes")]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="operation",
            index=models.Index(
                fields=["owner", "updated_at"],
                name="operation_open_owner_updated",
                condition=UNFINISHED,
            ),
        ),
    ]
