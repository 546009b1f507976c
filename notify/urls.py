"""Console routes of notifications."""

from notify import views

urlpatterns = views.urlpatterns
