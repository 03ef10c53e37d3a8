from typing import cast

from django.contrib import admin
from django.urls import include, path, reverse_lazy

# The admin names Conch, not "Django administration", and its "View site" is the chat list.
admin.site.site_header = "Conch admin"
admin.site.site_title = "Conch admin"
admin.site.index_title = "Personas, chats and the gateway"
# Lazy: the URLs are not all loaded yet; the admin renders it as the string it becomes.
admin.site.site_url = cast(str, reverse_lazy("chats:chat-list"))

urlpatterns = [
    path("admin/", admin.site.urls),
    path("gateway/", include("chats.gateway.urls")),
    path("", include("together.urls")),
    path("", include("chats.urls")),
]
