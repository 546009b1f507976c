"""Console routes of runs (included at the site root by agentconsole/urls.py)."""

from runs.views import handoffs, profiles, runs

# profiles first: "/runs/new/" before "/runs/<run_id>/".
urlpatterns = profiles.urlpatterns + runs.urlpatterns + handoffs.urlpatterns
