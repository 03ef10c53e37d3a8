"""The full-text index for search_chats: FTS5 on SQLite, a GIN expression index on PostgreSQL.

Each database gets only its own statements (:class:`ForVendor`); neither
changes a model, so the migration state is untouched. The SQL is in
``together.fulltext``, which also puts the SQLite triggers back after any
later migration that remakes ``chats_entry``.
"""

from django.db import migrations

from together import fulltext


class ForVendor(migrations.RunSQL):
    """``RunSQL`` that runs only on one database vendor (``sqlite`` or ``postgresql``)."""

    def __init__(self, vendor, sql, reverse_sql):
        self.vendor = vendor
        super().__init__(sql=sql, reverse_sql=reverse_sql, elidable=False)

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == self.vendor:
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == self.vendor:
            super().database_backwards(app_label, schema_editor, from_state, to_state)

    def describe(self):
        return f"Full-text index for search_chats on {self.vendor}"


class Migration(migrations.Migration):
    dependencies = [
        ("chats", "0003_gateway"),
        ("together", "0002_message_passed_on"),
    ]

    operations = [
        ForVendor("sqlite", fulltext.SQLITE_INSTALL, fulltext.SQLITE_REMOVE),
        ForVendor("postgresql", fulltext.POSTGRES_INSTALL, fulltext.POSTGRES_REMOVE),
    ]
