from django.db import migrations, models
from django.db.models.functions import Lower

from core.migration_operations import AddIndexConcurrentlyOnPostgres

IN_FLIGHT = models.Q(("status__in", ["signed", "submitted", "broadcast"]))


class Migration(migrations.Migration):
    # The admin's and the console's lists read in their own order (newest first), so a page
    # reads its rows however many match, where they read and sorted all of them:
    # - a smart account's actions in any spelling of the address (an IN over two spellings
    #   sorted the account's whole history, or walked the whole table's created_at index);
    # - a status filter (the status index it replaces served the lookups, not the order);
    # - the "stuck" filter, in flight and signed long ago.
    # Built CONCURRENTLY first; the indexes they replace (and their varchar_pattern_ops
    # twins) go after.
    atomic = False

    dependencies = [("actions", "0021_spend_permission_session_key_index")]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="action",
            index=models.Index(
                Lower("smart_account"),
                models.F("created_at").desc(),
                models.F("id").desc(),
                name="action_account_created",
            ),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="action",
            index=models.Index(
                fields=["status", "-created_at", "-id"], name="action_status_created"
            ),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="action",
            index=models.Index(
                fields=["-created_at", "-id"], name="action_in_flight_created", condition=IN_FLIGHT
            ),
        ),
        migrations.AlterField(
            model_name="action",
            name="smart_account",
            field=models.CharField(max_length=42),
        ),
        migrations.AlterField(
            model_name="action",
            name="status",
            field=models.CharField(
                choices=[
                    ("proposed", "Proposed"),
                    ("signed", "Signed"),
                    ("submitted", "Submitted"),
                    ("broadcast", "Broadcast"),
                    ("executed", "Executed"),
                    ("failed", "Failed"),
                    ("expired", "Expired"),
                    ("rejected", "Rejected"),
                ],
                default="proposed",
                max_length=16,
            ),
        ),
    ]
