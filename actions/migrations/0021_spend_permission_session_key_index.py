from django.db import migrations, models

from core.migration_operations import AddIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    # The console's search by a session key's address was a walk of the table (or of its
    # created_at index) filtering every row; CONCURRENTLY, as 0020's indexes.
    atomic = False

    dependencies = [("actions", "0020_search_indexes")]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="spendpermission",
            index=models.Index(fields=["session_key_address"], name="spend_permission_session_key"),
        ),
    ]
