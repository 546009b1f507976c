"""/api/ routes. The OpenAPI schema is at /api/schema/, a browsable view at /api/docs/."""

from csp.constants import NONCE
from csp.decorators import csp_update
from django.http import HttpRequest, JsonResponse
from django.urls import path, re_path
from django.utils.decorators import method_decorator
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework import exceptions, parsers, status
from rest_framework.authtoken.models import Token
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.request import Request
from rest_framework.response import Response

from agentconsole.access import auth
from agentconsole.kernel.http import LimitedJSONParser, StrictSerializer
from memory import apis as memory_api
from policy import apis as policy_api
from policy.mcp import apis as mcp_apis
from runs import apis as runs_api
from runs.start import profile_apis
from runs.trace import trace_apis


class StrictTokenSerializer(StrictSerializer, AuthTokenSerializer):
    """username + password, nothing else (an extra "scope" is an error, not ignored)."""


class StrictObtainAuthToken(ObtainAuthToken):
    serializer_class = StrictTokenSerializer
    # DRF's view lists its own parsers, the plain JSONParser among them: 100,000 nested brackets
    # were a RecursionError (500). The API's guarded parser here too; forms as DRF ships them.
    parser_classes = (LimitedJSONParser, parsers.FormParser, parsers.MultiPartParser)

    def get_authenticators(self) -> list:
        # Signing in needs no credentials: a stale or expired token header must not stop a
        # client from getting a new token. DELETE (revoke) authenticates as every API view.
        # (The schema generator builds the view without a request.)
        if getattr(getattr(self, "request", None), "method", None) == "POST":
            return []
        return super().get_authenticators()

    def post(self, request: Request, *args: object, **kwargs: object) -> Response:
        """The serializer calls ``authenticate``, whose backend applies the sign-in throttle
        (agentconsole/access/auth.py): a throttled attempt raises LOGIN_THROTTLED, 429 with
        Retry-After, through the API's handler."""
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        user = serializer.validated_data["user"]
        return Response({"token": auth.token_for(user).key})

    @extend_schema(request=None, responses={204: None})
    def delete(self, request: Request, *args: object, **kwargs: object) -> Response:
        """Revoke the caller's tokens (every one of them: a user has one token at a time)."""
        if not request.user.is_authenticated:
            raise exceptions.NotAuthenticated()
        Token.objects.filter(user=request.user).delete()
        return Response(status=status.HTTP_204_NO_CONTENT)


# The page's own policy: its start-up script is inline (it carries the CSRF token, which a script
# file at a URL of its own would serve to any page that includes it), so it carries this
# response's nonce; Swagger UI's stylesheet draws its icons as data: images.
@method_decorator(csp_update({"script-src": [NONCE], "img-src": ["data:"]}), name="get")
class ApiDocs(SpectacularSwaggerView):
    """/api/docs/ under the console's Content-Security-Policy (templates/console/api_docs.html:
    the script with the nonce, drf-spectacular's inline <style> as a static file)."""

    template_name = "console/api_docs.html"


# Exempt: a POST to no route is a 404, not Django's CSRF page (it reads and changes nothing).
@csrf_exempt
def _not_found(request: HttpRequest, *args: object, **kwargs: object) -> JsonResponse:
    return JsonResponse(
        {"code": "NOT_FOUND", "message": "no such API route", "extra": {}}, status=404
    )


urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs/", ApiDocs.as_view(url_name="api-schema"), name="api-docs"),
    path("auth/token/", StrictObtainAuthToken.as_view(), name="api-token"),
    path("runs/", runs_api.RunListCreate.as_view(), name="api-runs"),
    path("profiles/", profile_apis.ProfileList.as_view(), name="api-profiles"),
    path("runs/<str:run_id>/", runs_api.RunDetail.as_view(), name="api-run"),
    path("runs/<str:run_id>/cancel/", runs_api.RunCancel.as_view(), name="api-run-cancel"),
    path("runs/<str:run_id>/events/", runs_api.RunEvents.as_view(), name="api-run-events"),
    *(
        path(
            f"runs/<str:run_id>/trace.{fmt}",
            trace_apis.RunTraceDownload.as_view(),
            {"fmt": fmt},
            name=f"api-run-trace-{fmt}",
        )
        for fmt in ("json", "ndjson")
    ),
    path(
        "runs/<str:run_id>/observations/",
        runs_api.RunObservations.as_view(),
        name="api-run-observations",
    ),
    path("runs/<str:run_id>/ledger/", runs_api.RunLedger.as_view(), name="api-run-ledger"),
    path("runs/<str:run_id>/grants/", policy_api.RunGrants.as_view(), name="api-run-grants"),
    path("confirmations/", policy_api.ConfirmationList.as_view(), name="api-confirmations"),
    # Before "confirmations/<id>/": "batch" is no confirmation id.
    path(
        "confirmations/batch/",
        policy_api.ConfirmationBatch.as_view(),
        name="api-confirmation-batch",
    ),
    path(
        "confirmations/<str:confirmation_id>/",
        policy_api.ConfirmationDetail.as_view(),
        name="api-confirmation",
    ),
    path(
        "confirmations/<str:confirmation_id>/approve/",
        policy_api.ConfirmationApprove.as_view(),
        name="api-confirmation-approve",
    ),
    path(
        "confirmations/<str:confirmation_id>/decline/",
        policy_api.ConfirmationDecline.as_view(),
        name="api-confirmation-decline",
    ),
    path(
        "confirmations/<str:confirmation_id>/edit/",
        policy_api.ConfirmationEdit.as_view(),
        name="api-confirmation-edit",
    ),
    path(
        "confirmations/<str:confirmation_id>/respond/",
        policy_api.ConfirmationRespond.as_view(),
        name="api-confirmation-respond",
    ),
    path("handoffs/", runs_api.HandoffList.as_view(), name="api-handoffs"),
    path("handoffs/<int:handoff_id>/", runs_api.HandoffDetail.as_view(), name="api-handoff"),
    path(
        "handoffs/<int:handoff_id>/claim/",
        runs_api.HandoffClaim.as_view(),
        name="api-handoff-claim",
    ),
    path(
        "handoffs/<int:handoff_id>/resolve/",
        runs_api.HandoffResolve.as_view(),
        name="api-handoff-resolve",
    ),
    path("queues/", runs_api.QueueCounts.as_view(), name="api-queues"),
    path("mcp/servers/", mcp_apis.McpServerList.as_view(), name="api-mcp-servers"),
    path("mcp/servers/<str:name>/", mcp_apis.McpServerDetail.as_view(), name="api-mcp-server"),
    path(
        "mcp/servers/<str:name>/refresh/",
        mcp_apis.McpServerRefresh.as_view(),
        name="api-mcp-server-refresh",
    ),
    path(
        "mcp/servers/<str:name>/enabled/",
        mcp_apis.McpServerEnabled.as_view(),
        name="api-mcp-server-enabled",
    ),
    path(
        "mcp/servers/<str:name>/tools/<str:tool>/accept/",
        mcp_apis.McpToolAccept.as_view(),
        name="api-mcp-tool-accept",
    ),
    path("preferences/", memory_api.PreferenceList.as_view(), name="api-preferences"),
    path("preferences/changes/", memory_api.ChangePropose.as_view(), name="api-pref-propose"),
    path(
        "preferences/changes/<int:change_id>/apply/",
        memory_api.ChangeApply.as_view(),
        name="api-pref-apply",
    ),
    path("preferences/history/", memory_api.PreferenceHistory.as_view(), name="api-pref-history"),
    path("preferences/export/", memory_api.PreferenceExport.as_view(), name="api-pref-export"),
    path("preferences/erase/", memory_api.PreferenceErase.as_view(), name="api-pref-erase"),
    path(
        "preferences/<str:key>/revoke/",
        memory_api.PreferenceRevoke.as_view(),
        name="api-pref-revoke",
    ),
    # Anything else under /api/ answers in the API's error shape, not Django's HTML page.
    re_path(r"^.*$", _not_found, name="api-not-found"),
]
