"""An index for routing a cold channel's message: one lookup a tier, each a prefix of it."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("gateway", "0004_routines")]

    operations = [
        migrations.AddIndex(
            model_name="binding",
            index=models.Index(
                fields=["channel", "peer", "parent_peer", "guild_id", "team_id", "account_id"],
                name="binding_by_tier_keys",
            ),
        ),
    ]
