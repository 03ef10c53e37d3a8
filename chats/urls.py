from django.urls import path

from chats import views

app_name = "chats"

urlpatterns = [
    path("", views.home, name="home"),
    path("chats/", views.chat_list, name="chat-list"),
    path("chats/new/", views.chat_create, name="chat-create"),
    path("chats/archived/", views.archived, name="archived"),
    path("c/<str:public_id>/", views.chat_detail, name="chat"),
    path("c/<str:public_id>/regions/", views.chat_regions, name="chat-regions"),
    path("c/<str:public_id>/send/", views.chat_send, name="chat-send"),
    path("c/<str:public_id>/stop/", views.chat_stop, name="chat-stop"),
    path(
        "c/<str:public_id>/queued/<int:queued_id>/cancel/",
        views.chat_queued_cancel,
        name="chat-queued-cancel",
    ),
    path("c/<str:public_id>/retry/", views.chat_retry, name="chat-retry"),
    path("c/<str:public_id>/edit/", views.chat_edit, name="chat-edit"),
    path("c/<str:public_id>/approve/", views.chat_approve, name="chat-approve"),
    path("c/<str:public_id>/deny/", views.chat_deny, name="chat-deny"),
    path(
        "c/<str:public_id>/allowed/<int:ok_id>/take-back/",
        views.chat_allowed_take_back,
        name="chat-allowed-take-back",
    ),
    path("c/<str:public_id>/mode/", views.chat_mode, name="chat-mode"),
    path("c/<str:public_id>/rename/", views.chat_rename, name="chat-rename"),
    path("c/<str:public_id>/archive/", views.chat_archive, name="chat-archive"),
    path("c/<str:public_id>/pin/", views.chat_pin, name="chat-pin"),
    path("c/<str:public_id>/delete/", views.chat_delete, name="chat-delete"),
    path("connect/", views.connect, name="connect"),
    path("connect/try/", views.connect_post, name="connect-post"),
    path("signin/", views.signin, name="signin"),
    path("signin/<str:token>/", views.signin_token, name="signin-token"),
    path("signout/", views.signout, name="signout"),
]
