from django.urls import path

from chats import consumers

websocket_urlpatterns = [
    path("ws/", consumers.WorkspaceConsumer.as_asgi()),
]
