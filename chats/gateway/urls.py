from django.urls import path

from chats.gateway import views

app_name = "gateway"

urlpatterns = [
    path("inbound", views.inbound, name="inbound"),
    path("telegram/<str:account>", views.telegram_webhook, name="telegram"),
    path("playground/", views.playground, name="playground"),
    path("playground/scope/", views.playground_scope, name="playground-scope"),
    path("playground/bindings/", views.playground_binding_add, name="playground-binding-add"),
    path(
        "playground/bindings/<int:binding_id>/remove/",
        views.playground_binding_remove,
        name="playground-binding-remove",
    ),
    path("playground/fire/", views.playground_fire, name="playground-fire"),
    path("playground/clear/", views.playground_clear, name="playground-clear"),
]
