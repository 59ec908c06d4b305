"""A quote is its agent's: only the OAuth application that asked for it may start it.

Existing quotes get no application, so no agent can start them any more: a quote lives
OPERATIONS_QUOTE_TTL_SECONDS (10 minutes by default), so this costs at most a new quote for
a start in flight across the deploy, and no quote leaks to another agent.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("operations", "0010_operations_per_agent"),
        migrations.swappable_dependency(settings.OAUTH2_PROVIDER_APPLICATION_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="quote",
            name="application",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="quotes",
                to=settings.OAUTH2_PROVIDER_APPLICATION_MODEL,
            ),
        ),
    ]
