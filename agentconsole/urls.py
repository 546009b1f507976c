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
# Errors outside DRF views (agentconsole/errors.py): JSON under /api/, a short page elsewhere.
handler400 = "agentconsole.errors.bad_request"
handler403 = "agentconsole.errors.permission_denied"
handler404 = "agentconsole.errors.page_not_found"
handler500 = "agentconsole.errors.server_error"

# daphne does not serve static files; in DEBUG let Django do it (empty list otherwise).
urlpatterns += staticfiles_urlpatterns()
