from django.apps import AppConfig


class TogetherConfig(AppConfig):
    """Chats that know about each other (ADR 0134), plugged into ``chats`` through its hooks."""

    name = "together"
    verbose_name = "Chats together"

    def ready(self) -> None:
        from chats.runtime import hooks
        from together.prompt import TOGETHER_PROMPT
        from together.reader import reader
        from together.tools import register_tools

        register_tools()
        hooks.add_system_section(TOGETHER_PROMPT, order=50)
        hooks.add_note_provider(reader)
