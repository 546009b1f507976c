"""Seed §15 row 'missing capability', grant scopes and constraints, and write_artifact's root.

Capabilities come from trusted grants only; the resource a call acts on is derived from its
arguments by the tool contract (a subject, a normalized path) and the grant must cover it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from memory.models import PreferenceRecord
from policy.models import Confirmation
from runs.models import Artifact, LedgerEntry
from tests.scenarios.conftest import completed_with, nothing_remembered, rejected_then_answered

pytestmark = pytest.mark.django_db(transaction=True)


def test_save_preference_without_memory_write_grant_is_missing_capability(run_scenario):
    result = run_scenario("s15-missing-capability")

    assert result.rejections() == [("p2", "authorization", "MISSING_CAPABILITY")]
    denied = [
        e
        for e in result.events("policy.capability.checked")
        if e["proposal_id"] == "p2" and e["details"]["result"] == "denied"
    ]
    assert len(denied) == 1
    assert result.status == "completed"
    assert result.stop_reason == "FINAL_ANSWER_VALIDATED"
    assert result.ledger_rows() == [("p1", "search_public", "succeeded")]
    nothing_remembered(result)
    # Authorization comes before confirmation: nobody is asked to confirm a forbidden call.
    assert result.confirmations == []
    assert Confirmation.objects.count() == 0
    assert result.events("proposal.waiting-confirmation") == []


def test_memory_grant_of_another_subject_does_not_cover_this_run(run_scenario):
    result = run_scenario("s15-capability-scope-mismatch")

    assert result.rejections() == [("p2", "authorization", "CAPABILITY_SCOPE_MISMATCH")]
    assert result.status == "completed"
    assert result.ledger_rows() == [("p1", "search_public", "succeeded")]
    assert PreferenceRecord.objects.count() == 0
    assert result.confirmations == []
    # The unused grant stays unused.
    memory_grant = next(g for g in result.grants if g["capability"] == "memory:write")
    assert memory_grant["calls_used"] == 0


def test_path_escapes_are_rejected_at_the_semantic_layer_and_write_nothing(
    run_scenario, scenario_data, run_output_root, list_files
):
    planner = scenario_data("s15-path-escape")["planner"]
    assert [p["arguments"]["path"] for p in planner if p.get("tool_name") == "write_artifact"] == [
        "run-output/../x",
        "/etc/passwd",
        "run-output/a/../../../etc/passwd",
        "run-output\\..\\x",
    ]

    result = run_scenario("s15-path-escape")

    # No write_artifact command was ever issued: the only ledger row is the search.
    rejected_then_answered(result, "semantic", ["PATH_OUTSIDE_ROOT"] * 4)
    assert not LedgerEntry.objects.filter(tool_name="write_artifact").exists()
    assert result.artifacts == []
    assert Artifact.objects.count() == 0
    # Not a single file under the run-output root, and no "x" next to it or in the cwd.
    assert list_files(run_output_root) == []
    assert not (run_output_root.parent / "x").exists()
    assert not (Path.cwd() / "x").exists()
    # The artifact grant was never used.
    artifact_grant = next(g for g in result.grants if g["capability"] == "artifact:write")
    assert artifact_grant["calls_used"] == 0


def test_valid_write_artifact_stores_the_file_and_its_hash(
    run_scenario, scenario_data, run_output_root, list_files
):
    content = next(
        p["arguments"]["content"]
        for p in scenario_data("s15-write-artifact")["planner"]
        if p.get("tool_name") == "write_artifact"
    )
    expected_sha = hashlib.sha256(content.encode("utf-8")).hexdigest()

    result = run_scenario("s15-write-artifact")

    assert result.status == "completed"
    assert result.stop_reason == "FINAL_ANSWER_VALIDATED"
    assert result.rejections() == []
    assert result.ledger_rows() == [("p1", "write_artifact", "succeeded")]
    (row,) = result.ledger
    assert row["verification"]["ok"] is True
    assert row["verification"]["details"]["sha256"] == expected_sha

    assert result.artifacts == [
        {
            "path": "run-output/reports/summary.md",
            "sha256": expected_sha,
            "size": len(content.encode("utf-8")),
        }
    ]
    assert Artifact.objects.count() == 1

    target = run_output_root / result.run_id / "reports" / "summary.md"
    assert target.is_file()
    assert target.read_bytes() == content.encode("utf-8")
    assert hashlib.sha256(target.read_bytes()).hexdigest() == expected_sha
    # Only that file (no temporary file left behind).
    assert list_files(run_output_root) == [target]

    # The tool result is trusted (write_artifact carries no outside text) and citable.
    tool_1 = result.observation("tool-1")
    assert tool_1["trust"] == "trusted-tool"
    assert tool_1["citable"] is True
    assert tool_1["content"]["value"]["sha256"] == expected_sha
    # The content is redacted from the trace; the path is logged.
    (received,) = result.received("p1")
    assert received["details"]["arg_path"] == "run-output/reports/summary.md"
    assert "arg_content" not in received["details"]
    assert content not in repr(result.trace)


def test_grant_constraint_narrows_the_scope(run_scenario, run_output_root, list_files):
    result = run_scenario("s15-grant-constraint")

    completed_with(
        result,
        [("p1", "authorization", "CAPABILITY_CONSTRAINT_VIOLATED")],
        [("p2", "write_artifact", "succeeded")],
    )
    assert [a["path"] for a in result.artifacts] == ["run-output/reports/ok.txt"]
    assert Artifact.objects.count() == 1
    run_dir = run_output_root / result.run_id
    assert list_files(run_output_root) == [run_dir / "reports" / "ok.txt"]
    assert not (run_dir / "other.txt").exists()
    (grant,) = result.grants
    assert grant["constraints"] == {"path": {"prefix": "run-output/reports/"}}
    assert grant["calls_used"] == 1
