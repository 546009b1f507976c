"""Console routes of policy: the confirmation queue."""

from policy import views

urlpatterns = views.urlpatterns
