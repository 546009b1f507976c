"""The run detail's timeline (runs.domain.console.timeline): trace events grouped by step, with the
story of each step — planner output, the gate's layers passed or the one that rejected, the tool's
outcome and duration, the verification. Plain Python, no database."""

from __future__ import annotations

from typing import Any

from runs.domain.console.timeline import Tone, build_timeline, describe


def _events(*items: tuple[str, str | None, dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"sequence": n, "event": name, "proposal_id": pid, "details": details}
        for n, (name, pid, details) in enumerate(items, start=1)
    ]


START = (
    ("run.created", None, {"grants": 1, "planner": "fixture"}),
    ("run.started", None, {"step": 0}),
    ("state.transitioned", None, {"from": "created", "to": "running"}),
)
TOOL_STEP = (
    ("planner.output", "p1", {"kind": "tool", "step": 1, "source": "fixture"}),
    ("proposal.received", "p1", {"tool": "search_public", "version": "1", "cites_untrusted": []}),
    ("proposal.schema.validated", "p1", {}),
    ("policy.capability.checked", "p1", {"result": "granted"}),
    ("policy.confirmation.checked", "p1", {"result": "not-required"}),
    ("tool.started", "p1", {"tool": "search_public", "version": "1", "step": 1}),
    ("tool.completed", "p1", {"tool": "search_public", "status": "succeeded", "duration_ms": 7}),
    ("tool.result.validated", "p1", {"valid": True, "verified": True}),
)
REJECTED_STEP = (
    ("planner.output", "p2", {"kind": "tool", "step": 2, "source": "fixture"}),
    (
        "proposal.received",
        "p2",
        {"tool": "save_preference", "version": "1", "cites_untrusted": ["tool-1"]},
    ),
    ("proposal.schema.validated", "p2", {}),
    ("proposal.rejected", "p2", {"layer": "semantic", "code": "MEMORY_KEY_NOT_ALLOWED"}),
)
FINAL_STEP = (
    ("planner.output", None, {"kind": "final", "step": 3, "source": "fixture"}),
    ("final.validated", None, {"citations": ["tool-1"]}),
    ("state.transitioned", None, {"from": "running", "to": "completed"}),
    ("run.stopped", None, {"reason": "FINAL_ANSWER_VALIDATED", "status": "completed"}),
)


def test_events_are_grouped_by_step_in_sequence_order() -> None:
    groups = build_timeline(_events(*START, *TOOL_STEP, *REJECTED_STEP, *FINAL_STEP))
    assert [g.step for g in groups] == [None, 1, 2, 3]
    assert [g.title for g in groups] == ["Run", "Step 1", "Step 2", "Step 3"]
    sequences = [e.sequence for g in groups for e in g.entries]
    assert sequences == list(range(1, 20))
    assert next(e.event for e in groups[1].entries) == "planner.output"


def test_a_step_tells_the_gate_layers_passed_the_tool_outcome_and_the_verification() -> None:
    step = build_timeline(_events(*TOOL_STEP))[0]
    assert step.tool == "search_public v1"
    assert step.passed == ["schema", "authorization", "confirmation"]
    assert step.rejected is None
    assert (step.outcome, step.duration_ms, step.verification) == ("succeeded", 7, "verified")
    assert step.headline == (
        "search_public v1 · passed schema, authorization, confirmation · succeeded in 7 ms"
        " · verified"
    )


def test_a_rejected_step_names_the_layer_and_code_and_never_a_tool_outcome() -> None:
    step = build_timeline(_events(*REJECTED_STEP))[0]
    assert step.rejected == ("semantic", "MEMORY_KEY_NOT_ALLOWED")
    assert step.passed == ["schema"]
    assert step.outcome is None
    assert "rejected at semantic: MEMORY_KEY_NOT_ALLOWED" in step.headline
    received, _, rejected = step.entries[1:]
    assert received.tone is Tone.WARN
    assert "untrusted content (tool-1)" in received.summary
    assert rejected.tone is Tone.BAD
    assert rejected.summary == "Gate · rejected at semantic: MEMORY_KEY_NOT_ALLOWED"


def test_a_step_resumed_after_its_confirmation_stays_one_step_and_passes_the_gate_again() -> None:
    events = _events(
        ("planner.output", "p1", {"kind": "tool", "step": 1, "source": "fixture"}),
        ("proposal.received", "p1", {"tool": "save_preference", "version": "1"}),
        ("proposal.schema.validated", "p1", {}),
        ("policy.capability.checked", "p1", {"result": "granted"}),
        ("policy.confirmation.checked", "p1", {"result": "required"}),
        ("proposal.waiting-confirmation", "p1", {"code": "USER_CONFIRMATION_REQUIRED"}),
        ("confirmation.decided", "p1", {"by": "operator", "decision": "approved"}),
        ("proposal.received", "p1", {"tool": "save_preference", "version": "1"}),
        ("proposal.schema.validated", "p1", {}),
        ("policy.capability.checked", "p1", {"result": "granted"}),
        ("policy.confirmation.checked", "p1", {"result": "confirmed"}),
        ("tool.started", "p1", {"tool": "save_preference", "version": "1"}),
        ("tool.completed", "p1", {"tool": "save_preference", "status": "unknown", "code": "X"}),
    )
    (step,) = build_timeline(events)
    assert step.passed == ["schema", "authorization", "confirmation"]
    assert step.outcome == "unknown"
    assert step.duration_ms is None
    summaries = [e.summary for e in step.entries]
    assert "Waiting for a confirmation (USER_CONFIRMATION_REQUIRED)" in summaries
    assert "Confirmation approved by operator" in summaries
    assert step.entries[-1].tone is Tone.WARN
    assert step.entries[-1].summary == "Tool save_preference unknown in ? ms (X)"


def test_a_loop_stop_and_a_rejected_final_name_their_own_layer() -> None:
    loop = build_timeline(
        _events(
            ("planner.output", "p3", {"kind": "tool", "step": 3}),
            ("proposal.loop-detected", "p3", {"code": "REPEATED", "count": 3}),
        )
    )[0]
    assert loop.rejected == ("loop guard", "REPEATED")
    final = build_timeline(
        _events(
            ("planner.output", None, {"kind": "final", "step": 2}),
            ("final.rejected", None, {"code": "FINAL_CITATION_VALIDATION_FAILED"}),
        )
    )[0]
    assert final.rejected == ("final", "FINAL_CITATION_VALIDATION_FAILED")


def test_events_before_any_planner_output_and_unknown_events_still_show() -> None:
    groups = build_timeline(_events(("something.new", None, {"x": 1}), *START))
    assert len(groups) == 1
    assert groups[0].step is None
    assert groups[0].entries[0].summary == "something.new"
    assert groups[0].entries[0].tone is Tone.MUTED
    assert build_timeline([]) == []


def test_missing_details_read_as_a_question_mark_never_raise() -> None:
    for name in ("tool.completed", "state.transitioned", "run.stopped", "proposal.rejected"):
        entry = describe({"sequence": 1, "event": name, "details": {}})
        assert "?" in entry.summary, (name, entry.summary)


def test_summaries_carry_only_detail_words_and_the_event_type_is_kept() -> None:
    entry = describe(
        {
            "sequence": 9,
            "event": "confirmation.decided",
            "proposal_id": "p1",
            "details": {"by": "<b>x</b>", "decision": "declined"},
        }
    )
    assert entry.event == "confirmation.decided"
    assert entry.sequence == 9
    assert entry.tone is Tone.BAD
    # Plain text: the template escapes it (never marked safe).
    assert entry.summary == "Confirmation declined by <b>x</b>"


def test_details_read_as_key_value_words_strings_as_they_are_the_rest_as_json() -> None:
    entry = describe(
        {
            "sequence": 1,
            "event": "final.validated",
            "details": {"citations": ["tool-1"], "by": "alice", "n": 2, "ok": True, "x": None},
        }
    )
    assert entry.details_text == 'citations=["tool-1"] by=alice n=2 ok=true x=null'


def test_a_model_step_names_its_model_endpoint_and_tokens() -> None:
    model = {"kind": "tool", "source": "model", "model": "qwen2.5-7b", "endpoint": "local",
             "input_tokens": 800, "output_tokens": 40, "step": 1}  # fmt: skip
    entry = describe({"sequence": 3, "event": "planner.output", "details": model})
    assert entry.summary == "Planner proposed a tool call (model: qwen2.5-7b via local, 840 tokens)"
    fixture = describe(
        {
            "sequence": 3,
            "event": "planner.output",
            "details": {"kind": "final", "source": "fixture"},
        }
    )
    assert fixture.summary == "Planner proposed a final answer (fixture)"


def test_a_decision_says_why_on_its_own_line() -> None:
    """issue 24 item 8: the decline reason is read without "Show event details"."""
    declined = describe(
        {
            "sequence": 8,
            "event": "confirmation.decided",
            "details": {"decision": "declined", "by": "operator", "reason": "not for this user"},
        }
    )
    assert declined.summary == "Confirmation declined by operator: not for this user"
    assert declined.tone is Tone.BAD
    silent = describe(
        {
            "sequence": 8,
            "event": "confirmation.decided",
            "details": {"decision": "approved", "by": "o"},
        }
    )
    assert silent.summary == "Confirmation approved by o"
