"""Seal auth-profile keys and bot tokens at rest (chats.secretbox).

Going forward, every plain secret is sealed with the secrets key; going back,
every sealed one is opened and stored plain again.
"""

from django.db import migrations

import chats.secretbox

SEALED = [("chats", "AuthProfile"), ("chats", "ChannelAccount")]


def seal(apps, schema_editor):
    for app_label, name in SEALED:
        model = apps.get_model(app_label, name)
        # Loading a plain value gives it back as it is; saving it seals it.
        for row in model.objects.exclude(secret="").only("pk", "secret"):
            model.objects.filter(pk=row.pk).update(secret=row.secret)


def open_again(apps, schema_editor):
    for app_label, name in SEALED:
        model = apps.get_model(app_label, name)
        table = schema_editor.quote_name(model._meta.db_table)
        with schema_editor.connection.cursor() as cursor:
            for row in model.objects.exclude(secret="").only("pk", "secret"):
                # Stored as it is, past the field that would seal it again.
                plain = chats.secretbox.secret_readable(row.secret)
                cursor.execute(f"UPDATE {table} SET secret = %s WHERE id = %s", [plain, row.pk])


class Migration(migrations.Migration):
    dependencies = [
        ("chats", "0003_gateway"),
    ]

    operations = [
        migrations.AlterField(
            model_name="authprofile",
            name="secret",
            field=chats.secretbox.EncryptedTextField(blank=True),
        ),
        migrations.AlterField(
            model_name="channelaccount",
            name="secret",
            field=chats.secretbox.EncryptedTextField(
                blank=True, help_text="The bot's token for sending replies."
            ),
        ),
        migrations.RunPython(seal, open_again),
    ]
