"""The gateway, a Django app of its own (label ``gateway``): chat-app and schedule messages
routed to the right session and the right agent.

- ``models``: bindings and the gateway's other records; ``apps``: its ``ready()`` (hooks,
  signals and sweeps).
- ``inbound``: the :class:`~chats.gateway.inbound.Inbound` message and its one parser.
- ``keys``: session keys, a pure function of the origin (``dmScope``, groups, threads, cron).
- ``routing``: the bindings ladder. ``resolve_route(inbound, *, index=None, dm_scope=None)``
  gives a :class:`~chats.gateway.routing.Route` (agent, session key, the rule that won)
  from a :class:`~chats.gateway.routing.RouteIndex`: one dict per tier, built once
  (``RouteIndex.load()`` from the database, ``RouteIndex.build(...)`` from any objects),
  never a scan. ``ladder``: the tiers and ties, refused when a binding is saved.
- ``services``: tokens, taking a message in, resets; ``lifecycle``: reset policies;
  ``schedule``: cron in a time zone (cronsim); ``routines``: routines and their runs;
  ``maintenance``: prune and compact; ``outbox`` and ``telegram``: replies going out;
  ``interop``: OpenClaw's sessions.json + .jsonl.
"""
