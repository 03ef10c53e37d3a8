from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("gateway/", include("chats.gateway.urls")),
    path("", include("together.urls")),
    path("", include("chats.urls")),
]
