"""Websocket routes of the whole project."""

from django.urls import path

from runs.consumers import ConsoleConsumer, RunTraceConsumer

websocket_urlpatterns = [
    path("ws/runs/<str:run_id>/trace/", RunTraceConsumer.as_asgi()),
    path("ws/console/", ConsoleConsumer.as_asgi()),
]
