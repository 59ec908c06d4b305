from django.db import migrations, models

from core.migration_operations import AddIndexConcurrentlyOnPostgres

OPEN = ~models.Q(("status__in", ["sent", "failed", "cancelled"]))


class Migration(migrations.Migration):
    # Stuck deliveries in each list's order: the console's oldest change first and the
    # admin's newest first read their page from these (small: open deliveries only), not
    # every open delivery sorted, nor the whole created_at index filtered.
    atomic = False

    dependencies = [("messaging", "0005_owner_created_index")]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="delivery",
            index=models.Index(fields=["updated_at"], name="delivery_open_updated", condition=OPEN),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="delivery",
            index=models.Index(
                fields=["-created_at", "-id"], name="delivery_open_created", condition=OPEN
            ),
        ),
    ]
