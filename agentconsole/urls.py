from django.contrib import admin
from django.contrib.staticfiles.urls import staticfiles_urlpatterns
from django.http import HttpRequest, JsonResponse
from django.urls import include, path
from django.views.decorators.http import require_GET
from django.views.generic import RedirectView


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness only: the process answers HTTP. Checks nothing else, so it never flaps."""
    return JsonResponse({"status": "ok"})


urlpatterns = [
    # Until the operator console lands, the read-only admin is the browser view of runs.
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("admin/", admin.site.urls),
    path("api/", include("agentconsole.api_urls")),
    path("healthz", healthz, name="healthz"),
]
# daphne does not serve static files; in DEBUG let Django do it (empty list otherwise).
urlpatterns += staticfiles_urlpatterns()
