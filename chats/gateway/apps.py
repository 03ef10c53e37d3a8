"""The gateway app (label ``gateway``), plugged into the runtime when it is ready.

- each chat app's sender (Telegram, Slack, …) joins the outbox's senders;
- a turn-end hook sends gateway replies out and does resets that waited;
- a change to a binding, an agent, an identity link or the gateway's
  settings drops the routing index (here, and by version in other processes);
  a binding that would tie is refused even when saved outside a form;
- a turn-end hook records how a routine's run ended and sends its words on;
- the runner's sweeps deliver the outbox, reset due sessions, fire due
  routines and run maintenance, each in a thread of its own so a slow chat app or a big store
  never holds up claiming replies.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from django.apps import AppConfig
from django.db import close_old_connections, connection
from django.db.models.signals import post_delete, post_save, pre_save

log = logging.getLogger(__name__)

OUTBOX_EVERY = 2.0
RESETS_EVERY = 60.0
ROUTINES_EVERY = 15.0
MAINTENANCE_EVERY = 3600.0

_background: dict[str, threading.Thread] = {}
_background_lock = threading.Lock()


def in_background(name: str, work: Callable[[], object]) -> threading.Thread | None:
    """Run ``work`` on its own thread unless the last run of ``name`` is still going."""
    with _background_lock:
        running = _background.get(name)
        if running is not None and running.is_alive():
            return None

        def run() -> None:
            try:
                close_old_connections()
                work()
            except Exception:
                log.exception("gateway %s failed", name)
            finally:
                connection.close()

        thread = threading.Thread(target=run, name=f"conch-gateway-{name}", daemon=True)
        _background[name] = thread
        thread.start()
        return thread


def binding_refuse_ties(sender, instance, raw=False, **kwargs) -> None:
    if not raw:
        instance.clean()


class GatewayAppConfig(AppConfig):
    name = "chats.gateway"
    label = "gateway"
    verbose_name = "Gateway"

    def ready(self) -> None:
        from chats import hooks
        from chats.gateway.discord import DiscordSender
        from chats.gateway.floods import inbound_limited_lately
        from chats.gateway.maintenance import maintenance_run
        from chats.gateway.models import Binding, GatewayConfig, IdentityLink, ResetPolicy
        from chats.gateway.outbox import outbox_deliver, register_sender
        from chats.gateway.routines import on_run_end, routines_fire
        from chats.gateway.routing import routing_changed
        from chats.gateway.services import on_turn_end, sessions_reset_sweep
        from chats.gateway.slack import SlackSender
        from chats.gateway.telegram import TelegramSender
        from chats.gateway.whatsapp import WhatsAppSender
        from chats.models import Agent

        def deliver_outbox() -> None:
            while outbox_deliver().sent:
                pass  # keep going while there is more

        def maintain() -> None:
            report = maintenance_run()
            log.info("gateway maintenance: %s", " | ".join(report.lines()[:3]))

        register_sender(TelegramSender())
        register_sender(WhatsAppSender())
        register_sender(SlackSender())
        register_sender(DiscordSender())
        hooks.add_turn_end_hook(on_turn_end)
        hooks.add_turn_end_hook(on_run_end)
        hooks.add_owner_notice(inbound_limited_lately)
        for model in (Binding, Agent, IdentityLink, GatewayConfig, ResetPolicy):
            post_save.connect(
                routing_changed, sender=model, dispatch_uid=f"gateway-routing-{model.__name__}"
            )
            post_delete.connect(
                routing_changed, sender=model, dispatch_uid=f"gateway-routing-del-{model.__name__}"
            )
        pre_save.connect(binding_refuse_ties, sender=Binding, dispatch_uid="gateway-binding-ties")
        hooks.register_sweep(
            "gateway.outbox", OUTBOX_EVERY, lambda: in_background("outbox", deliver_outbox)
        )
        hooks.register_sweep(
            "gateway.resets", RESETS_EVERY, lambda: in_background("resets", sessions_reset_sweep)
        )
        hooks.register_sweep(
            "gateway.routines", ROUTINES_EVERY, lambda: in_background("routines", routines_fire)
        )
        hooks.register_sweep(
            "gateway.maintenance", MAINTENANCE_EVERY, lambda: in_background("maintenance", maintain)
        )
