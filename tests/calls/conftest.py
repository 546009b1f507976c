"""Fixtures of the gateway tests: the slow model server and the endpoint that names it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bench.support.slow_model import SlowModel
from tests.calls import calls_kit as kit


@pytest.fixture
def model() -> Iterator[SlowModel]:
    server = SlowModel(delay_s=0.05).start()
    yield server
    server.stop()


@pytest.fixture
def endpoint(settings: Any, model: SlowModel, corpus: None) -> dict[str, Any]:
    settings.AGENTCONSOLE_MODEL_ENDPOINTS = kit.endpoint_settings(model)
    return settings.AGENTCONSOLE_MODEL_ENDPOINTS[kit.ENDPOINT]
