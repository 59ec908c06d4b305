from django.db import migrations, models

from core.migration_operations import AddIndexConcurrentlyOnPostgres

OPEN = ~models.Q(("status__in", ["sent", "failed", "cancelled"]))


class Migration(migrations.Migration):
    # The console's needs-attention list filtered by owner reads the owner's unfinished
    # deliveries oldest change first, instead of AND-ing all of the owner's deliveries with
    # every unfinished one (both grew with the table).
    atomic = False

    dependencies = [("messaging", "0006_open_delivery_indexes")]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="delivery",
            index=models.Index(
                fields=["created_by", "updated_at"],
                name="delivery_open_owner_updated",
                condition=OPEN,
            ),
        ),
    ]
