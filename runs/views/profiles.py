"""Console pages (views/profiles). Thin: check rights, call services and selectors, render."""

from __future__ import annotations

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
