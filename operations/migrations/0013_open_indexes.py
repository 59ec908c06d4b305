from django.db import migrations, models

from core.migration_operations import AddIndexConcurrentlyOnPostgres

UNFINISHED = ~models.Q(("state__in", ["succeeded", "failed", "cancelled"]))


class Migration(migrations.Migration):
    # Unfinished operations in each list's order: the console's needs-attention list (oldest
    # change first) and the admin's filters of unfinished work (newest first) read their page
    # from these, instead of every matching operation sorted.
    atomic = False

    dependencies = [("operations", "0012_review_queue_index")]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="operation",
            index=models.Index(
                fields=["updated_at"], name="operation_open_updated", condition=UNFINISHED
            ),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="operation",
            index=models.Index(
                fields=["-created_at", "-id"], name="operation_open_created", condition=UNFINISHED
            ),
        ),
    ]
