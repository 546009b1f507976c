"""The tracing settings from the environment (read by ``settings.py``; no Django import here).

Off by default. On with ``AGENTCONSOLE_OTEL=1``, or by setting the standard OTLP endpoint
variables (then ``AGENTCONSOLE_OTEL=0`` or ``OTEL_SDK_DISABLED=true`` still turn it off). Export
is OTLP over HTTP/protobuf (``pip install 'agentconsole[otlp]'``); the exporter reads the other
standard ``OTEL_EXPORTER_OTLP_*`` variables (headers, timeout) itself, the SDK the
``OTEL_TRACES_SAMPLER`` ones. See the README, "Tracing with OpenTelemetry".
"""

from __future__ import annotations

import os
from collections.abc import Mapping


def _on(value: str) -> bool:
    return value.strip().lower() in {"1", "true", "yes", "on"}


def otel_settings(environ: Mapping[str, str] = os.environ) -> tuple[bool, str, str]:
    """(``AGENTCONSOLE_OTEL``, ``AGENTCONSOLE_OTEL_ENDPOINT``, ``AGENTCONSOLE_OTEL_SERVICE_NAME``).

    The traces URL is the signal-specific variable as is, else the base endpoint + /v1/traces
    (as the OTLP exporter specification says)."""
    base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip().rstrip("/")
    traces = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    endpoint = traces or (f"{base}/v1/traces" if base else "")
    enabled = _on(environ.get("AGENTCONSOLE_OTEL", "1" if endpoint else "0"))
    enabled = enabled and not _on(environ.get("OTEL_SDK_DISABLED", "0"))
    return enabled, endpoint, environ.get("OTEL_SERVICE_NAME", "agentconsole")
