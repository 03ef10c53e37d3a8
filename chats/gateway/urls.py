from django.urls import path

from chats.gateway import discord, slack, views, whatsapp

app_name = "gateway"

urlpatterns = [
    path("inbound", views.inbound, name="inbound"),
    path("telegram/<str:account>", views.telegram_webhook, name="telegram"),
    path("slack/<str:account>", slack.slack_webhook, name="slack"),
    path("whatsapp/<str:account>", whatsapp.whatsapp_webhook, name="whatsapp"),
    path("discord/<str:account>/interactions", discord.discord_interactions, name="discord"),
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
    path("routines/", views.routines, name="routines"),
    path("routines/new/", views.routine_new, name="routine-new"),
    path("routines/<str:public_id>/", views.routine_page, name="routine"),
    path("routines/<str:public_id>/regions/", views.routine_regions, name="routine-regions"),
    path("routines/<str:public_id>/pause/", views.routine_pause_view, name="routine-pause"),
    path("routines/<str:public_id>/resume/", views.routine_resume_view, name="routine-resume"),
    path("routines/<str:public_id>/run/", views.routine_run_now_view, name="routine-run-now"),
]
