from django.urls import path

from chats import views

app_name = "chats"

urlpatterns = [
    path("", views.home, name="home"),
    path("signin/", views.signin, name="signin"),
    path("signin/<str:token>/", views.signin_token, name="signin-token"),
]
