"""Chats that know about each other (ADR 0134), plugged into ``chats`` through ``chats.hooks``."""

from django.apps import AppConfig


class TogetherConfig(AppConfig):
    name = "together"
    verbose_name = "Chats together"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from chats import hooks
        from together import messages, waits
        from together.cards import register_cards
        from together.fulltext import on_post_migrate
        from together.listing import CHATS_LISTED, LOOKING_AT_CHATS
        from together.prompt import TOGETHER_PROMPT
        from together.reader import reader, reader_waiting
        from together.tools import register_tools

        # together's own words: the families its tools show, the events its cards change on.
        hooks.family_add(LOOKING_AT_CHATS, can="see your other chats")
        hooks.family_add(messages.MESSAGING_A_CHAT, can="message and stop your other chats")
        hooks.family_add(waits.WAITING, can="wait for other chats and tasks")
        hooks.event_type_add(CHATS_LISTED, card=True)
        hooks.event_type_add(messages.CHAT_MESSAGE, card=True, row=True)
        register_tools()
        register_cards()
        hooks.add_system_section(TOGETHER_PROMPT, order=50)
        hooks.add_note_provider(reader, waiting=reader_waiting)
        hooks.add_note_provider(messages.message_reader, waiting=messages.messages_waiting)
        hooks.add_turn_end_hook(waits.after_turn_end)
        hooks.add_turn_end_hook(messages.after_turn_end)
        hooks.add_before_delete_hook(messages.on_delete)
        hooks.add_before_delete_hook(waits.on_delete)
        hooks.subscribe(waits.on_event)
        hooks.register_sweep("waits", waits.LOOK_EVERY, waits.sweep)
        hooks.add_in_use_check(waits.chats_waiting)
        hooks.add_held_counter(messages.held_counts)
        post_migrate.connect(on_post_migrate, sender=self, dispatch_uid="together.fulltext")
