"""The ``conch`` command: ``conch serve``, ``conch worker``, and every manage.py command.

``serve`` and ``worker`` are management commands in ``chats``, so ``conch``
is Django's manage with Conch's settings: ``conch migrate``, ``conch
conch_play …`` and ``conch help`` work as they do through ``manage.py``.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "conch.settings"
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        # Load the settings first: a bad variable is one clear line, not a traceback.
        settings.INSTALLED_APPS  # noqa: B018
    except ImproperlyConfigured as exc:
        sys.stderr.write(f"conch: {exc}\n")
        sys.exit(1)
    args = list(sys.argv[1:] if argv is None else argv)
    execute_from_command_line(["conch", *args])


if __name__ == "__main__":
    main()
