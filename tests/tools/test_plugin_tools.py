"""Integrators add tools through AGENTCONSOLE_TOOLS (issue 2, item 3)."""

import io
import json
import re
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command

from agentconsole import wiring
from tests.support.planner import tool_call

README = Path(__file__).resolve().parents[2] / "docs" / "tools.md"  # "Add your own tool"
PLUGIN = Path(__file__).resolve().parents[1] / "plugins" / "wordcount.py"


@pytest.fixture
def plugin_registry(settings):
    settings.AGENTCONSOLE_TOOLS = ["tests.plugins.wordcount"]
    wiring.registry.cache_clear()
    yield wiring.registry()
    wiring.registry.cache_clear()


@pytest.mark.django_db  # the registry reads the MCP catalog's stamp
def test_plugin_tool_is_registered_beside_the_builtins(plugin_registry):
    names = sorted(c.name for c in plugin_registry)
    assert names == ["save_preference", "search_public", "word_count", "write_artifact"]


@pytest.mark.django_db(transaction=True)
def test_plugin_tool_runs_through_the_gate(plugin_registry, tmp_path):
    scenario = {
        "subject": "alice",
        "goal": "count words",
        "grants": [{"capability": "text:analyze", "resource_scope": "*", "expires_at_step": 3}],
        "planner": [
            tool_call("p1", "word_count", {"text": "one two three"}, sources=None),
            {"kind": "final", "answer": "three words", "citation_observation_ids": ["tool-1"]},
        ],
    }
    path = tmp_path / "s.json"
    path.write_text(json.dumps(scenario))
    out = io.StringIO()
    call_command("run_fixture", str(path), "--json", stdout=out)
    result = json.loads(out.getvalue())
    assert result["state"]["status"] == "completed"
    tool_1 = next(o for o in result["observations"] if o["observation_id"] == "tool-1")
    assert tool_1["content"]["value"] == {"words": 3}
    # The contract marks `text` as redacted and logs nothing: the trace never holds it.
    assert "one two three" not in json.dumps(result["trace"])


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        (["tests.plugins.no_such_module"], "cannot import"),
        # The same tool identity twice (the module and its contract()) is refused.
        (["tests.plugins.wordcount", "tests.plugins.wordcount.contract"], "registered twice"),
    ],
    ids=["unimportable", "duplicate-identity"],
)
def test_a_bad_plugin_setting_is_a_configuration_error(settings, tools, message):
    settings.AGENTCONSOLE_TOOLS = tools
    wiring.registry.cache_clear()
    try:
        with pytest.raises(ImproperlyConfigured, match=message):
            wiring.registry()
    finally:
        wiring.registry.cache_clear()


def test_readme_shows_the_plugin_verbatim():
    """The README's example is this file, so the documented example is the tested one."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert PLUGIN.read_text() in blocks
