from django.apps import AppConfig


class TogetherConfig(AppConfig):
    name = "together"
    verbose_name = "Chats together"
