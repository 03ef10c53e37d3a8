from django.apps import AppConfig


class TogetherConfig(AppConfig):
    """Chats that know about each other (ADR 0134), plugged into ``chats`` through its hooks."""

    name = "together"
    verbose_name = "Chats together"

    def ready(self) -> None:
        from chats import events
        from chats.runtime import hooks
        from chats.runtime.runner import register_sweep
        from together import messages, waits
        from together.cards import register_cards
        from together.prompt import TOGETHER_PROMPT
        from together.reader import reader
        from together.tools import register_tools

        register_tools()
        register_cards()
        hooks.add_system_section(TOGETHER_PROMPT, order=50)
        hooks.add_note_provider(reader)
        hooks.add_note_provider(messages.message_reader)
        hooks.add_turn_end_hook(waits.after_turn_end)
        hooks.add_turn_end_hook(messages.after_turn_end)
        hooks.add_before_delete_hook(messages.on_delete)
        events.subscribe(waits.on_event)
        register_sweep("waits", waits.LOOK_EVERY, waits.sweep)
        from django.db.models.signals import post_migrate

        from together.fulltext import on_post_migrate

        post_migrate.connect(on_post_migrate, sender=self, dispatch_uid="together.fulltext")
