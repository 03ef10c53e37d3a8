"""Tools from Model Context Protocol servers.

:mod:`chats.mcp.client` is the connection layer: a synchronous face over the official
``mcp`` SDK, with a pool of live sessions (one server process per server and folder,
for stdio) kept by an event loop of its own.
"""
