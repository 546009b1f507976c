"""``GET /api/runs/<id>/trace.json`` and ``…/trace.ndjson``: a run's trace as a file to keep
(runs.trace.trace_export). Who may download it is who may see the run (a foreign run: 404, as on
its page); the console's run page links here (the session signs the request)."""

from __future__ import annotations

import re
from typing import Any

from django.core.handlers.asgi import ASGIRequest
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.request import Request
from rest_framework.views import APIView

from runs import selectors
from runs.trace.trace_export import FORMATS, trace_chunks, trace_chunks_async


class _FileNegotiation(DefaultContentNegotiation):
    """The file answers whatever the client accepts (``Accept: application/x-ndjson`` is no
    406); an error still leaves as the API's JSON."""

    def select_renderer(self, request: Any, renderers: Any, format_suffix: Any = None) -> Any:
        return renderers[0], renderers[0].media_type


class RunTraceDownload(APIView):
    content_negotiation_class = _FileNegotiation

    @extend_schema(
        responses={
            (200, "application/json"): OpenApiTypes.ANY,
            (200, "application/x-ndjson"): OpenApiTypes.STR,
        }
    )
    def get(self, request: Request, run_id: str, fmt: str) -> StreamingHttpResponse:
        run = selectors.access_run(user=request.user, run_id=run_id)  # NOT_FOUND: 404
        # Under daphne, an async iterator: Django would drain a sync one into memory first.
        asgi = isinstance(request._request, ASGIRequest)
        chunks = (trace_chunks_async if asgi else trace_chunks)(run_id=run.pk, fmt=fmt)
        response = StreamingHttpResponse(chunks, content_type=f"{FORMATS[fmt]}; charset=utf-8")
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", run.pk)  # run_<hex> today; nothing to quote
        response["Content-Disposition"] = f'attachment; filename="trace-{name}.{fmt}"'
        response["X-Content-Type-Options"] = "nosniff"
        return response
