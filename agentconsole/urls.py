from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.templatetags.static import static
from django.urls import include, path
from django.views.decorators.http import require_GET

from agentconsole import console
from agentconsole.access import auth
from agentconsole.ops import health, metrics


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness only: the process answers HTTP. Checks nothing else, so it never flaps."""
    return JsonResponse({"status": "ok"})


@require_GET
def favicon(request: HttpRequest) -> HttpResponseRedirect:
    """Browsers ask for /favicon.ico on pages that name no icon (the Django admin's): the
    console's icon, under its collected (hashed) name, so not a permanent redirect."""
    return HttpResponseRedirect(static("console/favicon.svg"))


@auth.sign_in_page
def admin_login(request: HttpRequest) -> HttpResponse:
    """The admin's login page, under the sign-in throttle (agentconsole/access/auth.py) like every
    door: the throttle is in ``authenticate``; this only shows its 429 as a page."""
    return admin.site.login(request)


urlpatterns = [
    # The operator console (server-rendered pages of each app; templates/, static/console/).
    path("", console.home, name="home"),
    path("login/", console.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("runs.urls")),
    path("", include("policy.urls")),
    path("", include("memory.urls")),
    path("", include("notify.urls")),
    # Before admin.site.urls: the same path, its 429 shown as a page.
    path("admin/login/", admin_login, name="admin-login-throttled"),
    path("admin/", admin.site.urls),
    path("api/", include("agentconsole.api_urls")),
    path("healthz", healthz, name="healthz"),
    path("favicon.ico", favicon, name="favicon"),
    # Readiness (database, broker, channel layer, a worker's heartbeat) and the Prometheus
    # scrape (operators or the metrics token); agentconsole/ops/health.py,
    # agentconsole/ops/metrics.py.
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics.metrics, name="metrics"),
]
# Errors outside DRF views (agentconsole/errors.py): JSON under /api/, a short page elsewhere.
handler400 = "agentconsole.errors.bad_request"
handler403 = "agentconsole.errors.permission_denied"
handler404 = "agentconsole.errors.page_not_found"
handler500 = "agentconsole.errors.server_error"
