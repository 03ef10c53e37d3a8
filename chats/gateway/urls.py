from django.urls import path

from chats.gateway import views

app_name = "gateway"

urlpatterns = [
    path("inbound", views.inbound, name="inbound"),
    path("telegram/<str:account>", views.telegram_webhook, name="telegram"),
]
