from django.urls import path

from together import views

app_name = "together"

urlpatterns = [
    # The ADR's own address for the person's press on a held message.
    path(
        "api/conversations/<str:public_id>/messages/<str:message_id>",
        views.message_press,
        name="message-press",
    ),
    path("c/<str:public_id>/inbound/", views.chat_inbound, name="chat-inbound"),
    path("search/", views.search, name="search"),
]
