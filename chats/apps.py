from django.apps import AppConfig


class ChatsConfig(AppConfig):
    name = "chats"
    verbose_name = "Chats"

    def ready(self) -> None:
        from chats.tools import workspace  # noqa: F401  registers the workspace tools
