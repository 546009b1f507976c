"""Console routes of memory: the user's preferences, memory administration."""

from memory import views

urlpatterns = views.urlpatterns
