"""Reading a run back: the export (``runs.selectors.run_export``, also what ``run_fixture
--json`` prints) with the small lookups every folder's assertions use. Folders subclass it for
their own checks (scenario invariants, memory rows)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from django.core.management import call_command

import runs
from runs.start.scenarios import parse_scenario, run_scenario
from runs.tools.corpus import demo_corpus_dir, document_load

FIXTURES = Path(runs.__file__).resolve().parent / "fixtures"
SCENARIO_DIR = FIXTURES / "scenarios"


def load_fixture(relative: str) -> dict[str, Any]:
    """A file under runs/fixtures/ (``relative`` to it) as JSON data."""
    data: dict[str, Any] = json.loads((FIXTURES / relative).read_text(encoding="utf-8"))
    return data


def scenario_run(data: dict[str, Any], owner: Any) -> dict[str, Any]:
    """Run a scenario in-process (``runs.start.scenarios.run_scenario``); its export."""
    return run_scenario(parse_scenario(json.dumps(data, ensure_ascii=False)), owner=owner)


class ExportedRun:
    """One exported run. Lists absent from an export (older shapes) read as empty."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.state: dict[str, Any] = data["state"]
        self.trace: list[dict[str, Any]] = data["trace"]
        self.observations: list[dict[str, Any]] = data["observations"]
        self.ledger: list[dict[str, Any]] = data["ledger"]
        self.confirmations: list[dict[str, Any]] = data.get("confirmations", [])
        self.grants: list[dict[str, Any]] = data.get("grants", [])
        self.preferences: list[dict[str, Any]] = data.get("preferences", [])
        self.artifacts: list[dict[str, Any]] = data.get("artifacts", [])

    @property
    def run_id(self) -> str:
        return self.state["run_id"]

    @property
    def status(self) -> str:
        return self.state["status"]

    @property
    def stop_reason(self) -> str | None:
        return self.state["stop_reason"]

    def events(self, name: str, proposal_id: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self.trace
            if e["event"] == name and (proposal_id is None or e["proposal_id"] == proposal_id)
        ]

    def names(self) -> list[str]:
        return [e["event"] for e in self.trace]

    def rejections(self) -> list[tuple[str | None, str, str]]:
        """(proposal id, layer, code) of every ``proposal.rejected`` event, in order."""
        return [
            (e["proposal_id"], e["details"]["layer"], e["details"]["code"])
            for e in self.events("proposal.rejected")
        ]

    def ledger_rows(self) -> list[tuple[str, str, str]]:
        """(proposal id, tool name, status) of every ledger row, in order."""
        return [(r["proposal_id"], r["tool_name"], r["status"]) for r in self.ledger]

    def observation(self, observation_id: str) -> dict[str, Any]:
        found = [o for o in self.observations if o["observation_id"] == observation_id]
        assert len(found) == 1, f"expected one observation {observation_id}, got {found}"
        return found[0]

    def check_sequence(self) -> None:
        """The trace is one gap-free sequence; one ledger row per tool call."""
        assert [e["sequence"] for e in self.trace] == list(range(1, len(self.trace) + 1))
        assert len(self.ledger) == self.state["tool_calls"]


def scenario_path(name: str) -> Path:
    path = SCENARIO_DIR / f"{name}.json"
    assert path.is_file(), f"missing scenario file {path}"
    return path


def load_scenario(name: str) -> dict[str, Any]:
    return json.loads(scenario_path(name).read_text(encoding="utf-8"))


def run_fixture_json(path: Path | str) -> dict[str, Any]:
    """``manage.py run_fixture FILE --json`` in-process: the export it prints."""
    buf = io.StringIO()
    call_command("run_fixture", str(path), "--json", stdout=buf)
    return json.loads(buf.getvalue())


def load_demo_corpus() -> None:
    """The demo corpus ``search_public`` reads (committed by the caller's transaction mode)."""
    files = sorted(demo_corpus_dir().glob("*.md"))
    assert files, "the demo corpus is empty"
    for path in files:
        document_load(path=path)


def use_run_output_root(settings: Any, root: Path) -> Path:
    """Artifacts of every run go under ``root`` (read when each run starts)."""
    root.mkdir(parents=True, exist_ok=True)
    settings.AGENTCONSOLE_RUN_OUTPUT_ROOT = str(root)
    return root


def bare_run(**extra: Any) -> Any:
    """``run_create`` for alice with the default budgets, no grants and no planner outputs;
    ``extra`` goes to ``run_create`` (confirmations, faults...)."""
    from runs import services
    from runs.domain.budgets import RunBudgets

    return services.run_create(
        subject="alice",
        goal="g",
        budgets=RunBudgets(),
        grants=[],
        planner={"kind": "fixture", "outputs": []},
        **extra,
    )
