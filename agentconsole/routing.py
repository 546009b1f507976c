"""Websocket routes of the whole project (apps add theirs here)."""

from django.urls import URLPattern

websocket_urlpatterns: list[URLPattern] = []
