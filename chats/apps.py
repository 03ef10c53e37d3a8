"""The chat runtime's app: its own tools and words join the registries in ``chats.hooks``."""

from django.apps import AppConfig


class ChatsConfig(AppConfig):
    name = "chats"
    verbose_name = "Chats"

    def ready(self) -> None:
        from chats import hooks
        from chats.mcp import servers as mcp_servers

        # First: no tool of Conch's may then take a name of the persona's MCP tools.
        mcp_servers.register()
        from chats.tools import tasks, workspace  # noqa: F401  workspace registers its tools on import

        tasks.register_tools()
        hooks.add_system_section(tasks.TASKS_PROMPT, order=40)
        from chats.tools import web

        web.register_tools()  # fetch_page: reading a web page marks the chat untrusted
        from chats.signout import connect_signout

        connect_signout()  # a session that ends closes its sockets
