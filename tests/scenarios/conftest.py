"""Scenario-file acceptance tests: fixtures shared by every test in this folder.

Every scenario runs through the real command, ``manage.py run_fixture FILE --json``, in-process
(``call_command``), and the test reads the JSON it prints (``runs.selectors.run_export``: state,
trace, observations, ledger, grants, confirmations, preferences, artifacts).

Tools run in a separate thread with their own database connection, so every test that runs a
scenario uses ``@pytest.mark.django_db(transaction=True)``: the tool thread must see committed rows.

``ScenarioResult`` wraps that JSON with the lookups the tests need and checks, on every run, the
invariants that hold whatever the scenario (see ``ScenarioResult.check_invariants``).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memory.models import PreferenceHistory, PreferenceRecord
from tests.support.runs import (
    ExportedRun,
    load_scenario,
    run_fixture_json,
    scenario_path,
    use_run_output_root,
)

TERMINAL = {"completed", "failed", "cancelled"}


class ScenarioResult(ExportedRun):
    """The ``--json`` output of one ``run_fixture`` call, with small lookups."""

    def observation_ids(self) -> list[str]:
        return [o["observation_id"] for o in self.observations]

    def received(self, proposal_id: str) -> list[dict[str, Any]]:
        return [e for e in self.events("proposal.received") if e["proposal_id"] == proposal_id]

    def last_stop(self) -> dict[str, Any]:
        stops = self.events("run.stopped")
        assert stops, "no run.stopped event"
        return stops[-1]

    def segments(self) -> list[list[dict[str, Any]]]:
        """The trace cut at every planner output and every confirmation decision."""
        cuts: list[list[dict[str, Any]]] = [[]]
        for e in self.trace:
            if e["event"] in ("planner.output", "confirmation.decided"):
                cuts.append([])
            cuts[-1].append(e)
        return cuts

    def check_invariants(self) -> None:
        """What holds for every scenario, whatever its outcome."""
        # The trace is one gap-free sequence per run.
        assert [e["sequence"] for e in self.trace] == list(range(1, len(self.trace) + 1))
        assert self.trace[0]["event"] == "run.created"
        # Every planner output costs a step; the re-evaluation of a confirmed proposal does not.
        assert len(self.events("planner.output")) == self.state["step"]
        # Every planner output is marked as fixture output, never as model output.
        assert {e["details"]["source"] for e in self.events("planner.output")} <= {"fixture"}
        # One ledger row per tool call, and one tool.started per ledger row (same order).
        assert len(self.ledger) == self.state["tool_calls"]
        assert [e["proposal_id"] for e in self.events("tool.started")] == [
            r["proposal_id"] for r in self.ledger
        ]
        # A scenario run is over when the command returns: no tool is left running.
        assert all(r["status"] != "started" for r in self.ledger), self.ledger_rows()
        # A step (a planner output, or a person's decision) that ends in a rejection starts no
        # tool, and every started tool completed.
        for segment in self.segments():
            names = [e["event"] for e in segment]
            if "proposal.rejected" in names:
                assert "tool.started" not in names, names
        assert len(self.events("tool.started")) == len(self.events("tool.completed"))
        # Observation ids are unique within the run.
        ids = self.observation_ids()
        assert len(ids) == len(set(ids)), ids
        if self.status in TERMINAL:
            assert self.last_stop()["details"]["reason"] == self.stop_reason
            assert self.last_stop()["details"]["status"] == self.status
        # Only a completed run carries an answer, and it cites what the state says.
        if self.status == "completed":
            assert self.state["answer"]
            final = self.events("final.validated")
            assert len(final) == 1
            assert final[0]["details"]["citations"] == self.state["citations"]
        else:
            assert self.state["answer"] is None
            assert self.events("final.validated") == []


def run_command(path: Path | str) -> ScenarioResult:
    result = ScenarioResult(run_fixture_json(path))
    result.check_invariants()
    return result


def rejected_then_answered(result: ScenarioResult, layer: str, codes: list[str]) -> None:
    """p1..pN were rejected at ``layer`` with ``codes``; then one search ran and the answer
    citing it was validated."""
    completed_with(
        result,
        [(f"p{i}", layer, code) for i, code in enumerate(codes, 1)],
        [(f"p{len(codes) + 1}", "search_public", "succeeded")],
    )


def completed_with(
    result: ScenarioResult,
    rejections: list[tuple[str, str, str]],
    ledger: list[tuple[str, str, str]],
) -> None:
    """The run completed on a validated answer, with these rejections and ledger rows."""
    assert result.rejections() == rejections
    assert (result.status, result.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert result.ledger_rows() == ledger


def nothing_remembered(result: ScenarioResult) -> None:
    """The run wrote no long-term memory: none reported, no record, no history row."""
    assert result.preferences == []
    assert PreferenceRecord.objects.count() == 0
    assert PreferenceHistory.objects.count() == 0


@pytest.fixture(autouse=True)
def run_output_root(settings: Any, tmp_path: Path) -> Path:
    """Artifacts of every run go under this test's tmp_path (read when each run starts)."""
    return use_run_output_root(settings, tmp_path)


@pytest.fixture
def run_scenario(corpus: None) -> Callable[[str], ScenarioResult]:
    """Run ``runs/fixtures/scenarios/<name>.json`` through ``run_fixture --json``."""

    def run(name: str) -> ScenarioResult:
        return run_command(scenario_path(name))

    return run


@pytest.fixture
def run_variant(
    corpus: None, tmp_path_factory: pytest.TempPathFactory
) -> Callable[..., ScenarioResult]:
    """Run a copy of a scenario file with some top-level keys replaced.

    The copy is written outside the run-output root, so "no file under tmp_path" checks hold.
    """

    def run(name: str, **changes: Any) -> ScenarioResult:
        data = copy.deepcopy(load_scenario(name))
        data.update(changes)
        path = tmp_path_factory.mktemp("variants") / f"{name}-variant.json"
        path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
        return run_command(path)

    return run


@pytest.fixture
def scenario_data() -> Callable[[str], dict[str, Any]]:
    return load_scenario


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


@pytest.fixture
def list_files() -> Callable[[Path], list[Path]]:
    return files_under
