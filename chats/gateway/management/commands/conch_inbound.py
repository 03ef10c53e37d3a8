"""``manage.py conch_inbound``: take one inbound message in from a script.

The message is JSON, given with ``--json`` or on stdin, or built from field
options (``--channel telegram --chat-type dm --peer 42 --message-id 7 --text hi``).
It is checked exactly as ``POST /gateway/inbound`` checks it; a bad one exits
non-zero naming the field. The routing decision is printed as JSON.
"""

from __future__ import annotations

import json
import sys

from django.core.management.base import BaseCommand, CommandError

from chats.gateway.inbound import FIELDS, InboundError, inbound_json, inbound_parse
from chats.gateway.owners import OwnerError, owner_for_command
from chats.gateway.services import inbound_receive
from chats.runtime.chats import ConchError


class Command(BaseCommand):
    help = "Route one inbound message (JSON on stdin, --json, or field options) into its session."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--json", dest="body", help="The message as a JSON object.")
        parser.add_argument("--owner", help="Whose chats the sessions are (a username).")
        for name in FIELDS:
            flag = "--" + name.replace("_", "-")
            if name == "member_roles":
                parser.add_argument(
                    flag, dest=name, action="append", help="A role id (repeatable)."
                )
            else:
                parser.add_argument(flag, dest=name)

    def handle(self, *args, **options) -> None:
        given = {name: options[name] for name in FIELDS if options.get(name) is not None}
        if options["body"] is not None and given:
            raise CommandError("Give the message either as --json or as field options, not both.")
        try:
            if given:
                raw = given
            else:
                text = options["body"] if options["body"] is not None else sys.stdin.read()
                raw = inbound_json(text)
            message = inbound_parse(raw)
            owner = owner_for_command(options.get("owner"))
            result = inbound_receive(owner=owner, inbound=message)
        except InboundError as exc:
            raise CommandError(f"{exc.field}: {exc.message}") from None
        except (OwnerError, ConchError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(json.dumps(result.as_dict()))
