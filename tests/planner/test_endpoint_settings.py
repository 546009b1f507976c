"""``AGENTCONSOLE_MODEL_ENDPOINTS`` from the environment (agentconsole/config/env.py): one endpoint
from the short variables, several from JSON, each key from its own variable, never inline."""

from __future__ import annotations

import json

import pytest

from agentconsole.config import env


def test_one_endpoint_from_the_short_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTCONSOLE_MODEL_ENDPOINTS", raising=False)
    monkeypatch.setenv("AGENTCONSOLE_MODEL_BASE_URL", "http://127.0.0.1:11434/v1")
    monkeypatch.setenv("AGENTCONSOLE_MODEL_NAME", "llama3.1")
    monkeypatch.setenv("AGENTCONSOLE_MODEL_API_KEY", "k-1")
    monkeypatch.setenv("AGENTCONSOLE_MODEL_ENDPOINT", "ollama")
    assert env.model_endpoints() == {
        "ollama": {
            "base_url": "http://127.0.0.1:11434/v1",
            "api_key": "k-1",
            "model": "llama3.1",
            "timeout_s": 60.0,
            "max_in_flight": 64,
        }
    }


def test_several_endpoints_from_json_with_keys_from_their_own_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AGENTCONSOLE_MODEL_BASE_URL", raising=False)
    monkeypatch.setenv("HOSTED_KEY", "k-2")
    spec = {
        "vllm": {"base_url": "http://10.0.0.5:8000/v1", "model": "qwen", "timeout_s": 30},
        "hosted": {"base_url": "https://api.example/v1", "model": "m", "api_key_env": "HOSTED_KEY"},
    }
    monkeypatch.setenv("AGENTCONSOLE_MODEL_ENDPOINTS", json.dumps(spec))
    endpoints = env.model_endpoints()
    assert endpoints["hosted"]["api_key"] == "k-2"
    assert "api_key_env" not in endpoints["hosted"]
    assert endpoints["vllm"]["api_key"] == ""


@pytest.mark.parametrize(
    "raw",
    [
        "[1]",
        "{not json",
        json.dumps({"x": {"model": "m"}}),
        json.dumps({"x": {"base_url": "http://h/v1", "api_key": "inline"}}),
    ],
)
def test_a_bad_endpoint_setting_fails_at_startup(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("AGENTCONSOLE_MODEL_ENDPOINTS", raw)
    with pytest.raises(RuntimeError, match="AGENTCONSOLE_MODEL_ENDPOINTS"):
        env.model_endpoints()
