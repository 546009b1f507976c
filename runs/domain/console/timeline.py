"""The run detail's timeline: trace events grouped by step, each with a one-line summary.

A step starts at its ``planner.output`` event; everything after it (the gate's layers, the
confirmation, the tool's start and outcome, the verification, the final answer, the state
changes) belongs to that step until the next planner output. Events before the first planner
output (the run's creation and start) form the run's own group, step ``None``.

The order inside a step is the trace's order, which is already the story the issue asks for:
planner output → each gate layer passed, or the layer and code that rejected → tool started /
completed with its duration and outcome → verification. ``static/console/trace.js`` appends live
events by the same rule (a ``planner.output`` opens a new group) and the same summaries.

Plain Python: the details are controlled summaries (runs.domain.trace), never content.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runs.domain import trace as ev
from runs.domain import writes


class Tone(enum.StrEnum):
    """How an entry reads, as its line's class ``tone-<value>``: the colour only repeats what the
    summary says in words."""

    OK = "ok"
    BAD = "bad"
    WARN = "warn"
    INFO = "info"
    MUTED = "muted"


@dataclass(frozen=True)
class Entry:
    sequence: int
    event: str
    proposal_id: str | None
    tone: Tone
    summary: str
    details: Mapping[str, Any]

    @property
    def details_text(self) -> str:
        """The details as ``key=value`` words (strings as they are, anything else as JSON)."""
        return " ".join(
            f"{k}={v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}"
            for k, v in self.details.items()
        )


@dataclass
class StepGroup:
    """One step of the run (``step`` None: the run's creation, before the first planner output)."""

    step: int | None
    entries: list[Entry] = field(default_factory=list)
    tool: str | None = None
    passed: list[str] = field(default_factory=list)
    rejected: tuple[str, str] | None = None
    outcome: str | None = None
    duration_ms: int | None = None
    verification: str | None = None

    @property
    def title(self) -> str:
        return "Run" if self.step is None else f"Step {self.step}"

    @property
    def headline(self) -> str:
        """What the step came to, in a few words: the tool and how it ended."""
        parts: list[str] = []
        if self.tool:
            parts.append(self.tool)
        if self.passed:
            parts.append("passed " + ", ".join(self.passed))
        if self.rejected:
            parts.append(f"rejected at {self.rejected[0]}: {self.rejected[1]}")
        if self.outcome:
            timing = f" in {self.duration_ms} ms" if self.duration_ms is not None else ""
            parts.append(f"{self.outcome}{timing}")
        if self.verification:
            parts.append(self.verification)
        return " · ".join(parts)


Summary = Callable[[Mapping[str, Any]], tuple[Tone, str]]


def _s(details: Mapping[str, Any], key: str, default: str = "?") -> str:
    value = details.get(key)
    return default if value is None else str(value)


def _status_tone(status: str) -> Tone:
    return {"succeeded": Tone.OK, "unknown": Tone.WARN}.get(status, Tone.BAD)


def _planner(d: Mapping[str, Any]) -> tuple[Tone, str]:
    what = {"tool": "a tool call", "final": "a final answer"}.get(_s(d, "kind"), _s(d, "kind"))
    by = _s(d, "source")
    if d.get("model") is not None:
        # A model step says which model, through which endpoint, at what cost in tokens.
        tokens = sum(v for k in ("input_tokens", "output_tokens") if isinstance(v := d.get(k), int))
        by += f": {_s(d, 'model')} via {_s(d, 'endpoint')}, {tokens} tokens"
    return Tone.INFO, f"Planner proposed {what} ({by})"


def _received(d: Mapping[str, Any]) -> tuple[Tone, str]:
    untrusted = d.get("cites_untrusted") or []
    text = f"Proposal: {_s(d, 'tool')} v{_s(d, 'version')}"
    if untrusted:
        cited = ", ".join(str(u) for u in untrusted)
        return Tone.WARN, f"{text}, derived from untrusted content ({cited})"
    return Tone.INFO, text


def _layer(name: str, ok: tuple[str, ...]) -> Summary:
    def summary(d: Mapping[str, Any]) -> tuple[Tone, str]:
        result = _s(d, "result", "passed")
        tone = Tone.OK if result in ok else Tone.WARN
        return tone, f"Gate · {name}: {result}"

    return summary


def _rejected(d: Mapping[str, Any]) -> tuple[Tone, str]:
    return Tone.BAD, f"Gate · rejected at {_s(d, 'layer')}: {_s(d, 'code')}"


def _decided(d: Mapping[str, Any]) -> tuple[Tone, str]:
    decision = _s(d, "decision")
    tone = Tone.OK if decision == "approved" else Tone.BAD
    text = f"Confirmation {decision} by {_s(d, 'by')}"
    approved_by = d.get("approved_by")
    if isinstance(approved_by, list) and (len(approved_by) > 1 or decision != "approved"):
        # Four eyes: name every approver, and who had approved an item that was then declined.
        text += f" (approved by {', '.join(str(n) for n in approved_by)})" if approved_by else ""
    if d.get("reason"):
        # Why a person said no (or yes) is the line's point, not a detail behind the toggle.
        text += f": {d['reason']}"
    return tone, text


def _approval_recorded(d: Mapping[str, Any]) -> tuple[Tone, str]:
    approved_by = d.get("approved_by")
    count = len(approved_by) if isinstance(approved_by, list) else "?"
    return Tone.WARN, (
        f"Approval {count} of {_s(d, 'needed')} by {_s(d, 'by')}: waiting for a second approver"
    )


def _edited(d: Mapping[str, Any]) -> tuple[Tone, str]:
    """A person's edit, with what changed (values only of logged fields, as the trace holds)."""
    changes = d.get("changes")
    said = "; ".join(str(c) for c in changes) if isinstance(changes, list) else ""
    text = f"Proposal edited by {_s(d, 'by')}" + (f": {said}" if said else "")
    if d.get("reason"):
        text += f" (reason: {d['reason']})"
    return Tone.INFO, text


def _responded(d: Mapping[str, Any]) -> tuple[Tone, str]:
    return Tone.INFO, f"{_s(d, 'by')} responded instead of deciding: {_s(d, 'note', '')}"


def _completed(d: Mapping[str, Any]) -> tuple[Tone, str]:
    status = _s(d, "status")
    text = f"Tool {_s(d, 'tool')} {status} in {_s(d, 'duration_ms')} ms"
    if d.get("code"):
        text += f" ({d['code']})"
    return _status_tone(status), text


def _validated(d: Mapping[str, Any]) -> tuple[Tone, str]:
    if not d.get("valid", True):
        return Tone.BAD, "Verification: output invalid"
    verified = "post-condition verified" if d.get("verified") else "no post-condition"
    return Tone.OK, f"Verification: output valid, {verified}"


def _final(d: Mapping[str, Any]) -> tuple[Tone, str]:
    cited = ", ".join(str(c) for c in d.get("citations") or []) or "nothing"
    return Tone.OK, f"Final answer validated (cites {cited})"


def _stopped(d: Mapping[str, Any]) -> tuple[Tone, str]:
    status = _s(d, "status")
    tone = Tone.OK if status == "completed" else Tone.BAD if status == "failed" else Tone.WARN
    text = f"Run stopped: {_s(d, 'reason')} ({status})"
    if d.get("outcome_flag"):
        # A completed run whose write did not take effect (runs.domain.writes) is no success.
        n = sum(v for k in _NOT_APPLIED if isinstance(v := d.get(k), int))
        return Tone.WARN, f"{text}, {n} write{'' if n == 1 else 's'} not applied"
    return tone, text


_NOT_APPLIED = tuple(writes.FIELDS[o] for o in writes.NOT_APPLIED)


def _fixed(tone: Tone, text: str) -> Summary:
    def summary(d: Mapping[str, Any]) -> tuple[Tone, str]:
        return tone, text.format_map(_Missing(d))

    return summary


class _Missing(dict[str, Any]):
    """``str.format_map`` over details, a missing key reading as '?'."""

    def __missing__(self, key: str) -> str:
        return "?"


# The gate's layers: each one's event, its name, and the results that pass it.
_LAYERS: dict[str, tuple[str, tuple[str, ...]]] = {
    ev.PROPOSAL_SCHEMA_VALIDATED: ("schema", ("passed",)),
    ev.POLICY_CAPABILITY_CHECKED: ("authorization", ("granted",)),
    ev.POLICY_CONFIRMATION_CHECKED: ("confirmation", ("not-required", "confirmed")),
}

_SUMMARIES: dict[str, Summary] = {
    ev.RUN_CREATED: _fixed(Tone.INFO, "Run created (planner {planner}, {grants} grants)"),
    ev.RUN_STARTED: _fixed(Tone.INFO, "Run started"),
    ev.STATE_TRANSITIONED: _fixed(Tone.INFO, "State: {from} → {to}"),
    ev.PLANNER_REQUESTED: _fixed(
        Tone.INFO, "Model asked ({endpoint}, {model}): waiting for its reply"
    ),
    ev.PLANNER_OUTPUT: _planner,
    ev.PROPOSAL_RECEIVED: _received,
    **{event: _layer(name, ok) for event, (name, ok) in _LAYERS.items()},
    ev.PROPOSAL_REJECTED: _rejected,
    ev.PROPOSAL_WAITING_CONFIRMATION: _fixed(Tone.WARN, "Waiting for a confirmation ({code})"),
    ev.PROPOSAL_LOOP_DETECTED: _fixed(Tone.BAD, "Loop detected: {code} ({count} repeats)"),
    ev.CONFIRMATION_DECIDED: _decided,
    ev.CONFIRMATION_APPROVAL_RECORDED: _approval_recorded,
    ev.CONFIRMATION_EDITED: _edited,
    ev.CONFIRMATION_RESPONDED: _responded,
    ev.TOOL_STARTED: _fixed(Tone.INFO, "Tool {tool} v{version} started"),
    ev.TOOL_COMPLETED: _completed,
    ev.TOOL_RETRYING: _fixed(Tone.WARN, "Tool {tool} retrying (attempt {attempt})"),
    ev.TOOL_RECOVERED: _fixed(Tone.WARN, "Tool {tool} recovered ({how})"),
    ev.TOOL_RESULT_VALIDATED: _validated,
    ev.TOOL_VERIFICATION_FAILED: _fixed(Tone.BAD, "Verification failed: {code}"),
    ev.FINAL_VALIDATED: _final,
    ev.FINAL_REJECTED: _fixed(Tone.BAD, "Final answer rejected: {code}"),
    ev.RUN_CANCEL_REQUESTED: _fixed(Tone.WARN, "Cancel requested by {by}"),
    ev.RUN_STOPPED: _stopped,
    ev.HANDOFF_OPENED: _fixed(Tone.WARN, "Handoff opened: {reason}"),
    ev.HANDOFF_CLAIMED: _fixed(Tone.INFO, "Handoff claimed by {by}"),
    ev.HANDOFF_RESOLVED: _fixed(Tone.INFO, "Handoff resolved: {action} by {by}"),
    ev.RUN_VALUES_ERASED: _fixed(Tone.MUTED, "Values erased at the user's request"),
}


def describe(event: Mapping[str, Any]) -> Entry:
    """One trace event as a timeline entry (an event name not known here still shows)."""
    details = event.get("details") or {}
    name = str(event["event"])
    summary = _SUMMARIES.get(name)
    tone, text = summary(details) if summary else (Tone.MUTED, name)
    return Entry(
        sequence=int(event["sequence"]),
        event=name,
        proposal_id=event.get("proposal_id"),
        tone=tone,
        summary=text,
        details=details,
    )


def said(event: Mapping[str, Any]) -> dict[str, str]:
    """What a live frame or an events-API row says of its event beside its data: the same
    ``summary`` and ``tone`` the run's page renders (the console's script shows them as they
    come and holds no wording of its own)."""
    entry = describe(event)
    return {"summary": entry.summary, "tone": entry.tone.value}


def _fold(group: StepGroup, entry: Entry) -> None:
    """What the step came to: its tool, the gate layers passed, a rejection, the outcome."""
    d = entry.details
    if entry.event == ev.PROPOSAL_RECEIVED:
        group.tool = f"{_s(d, 'tool')} v{_s(d, 'version')}"
        group.passed, group.rejected = [], None  # a resumed proposal passes the gate again
    elif entry.event in _LAYERS:
        # The schema layer counts as passed whatever its result (as before; its one emitter,
        # runs.domain.step.decide, writes it only on a pass and with no result).
        if entry.tone is Tone.OK or entry.event == ev.PROPOSAL_SCHEMA_VALIDATED:
            group.passed.append(_LAYERS[entry.event][0])
    elif entry.event in (ev.PROPOSAL_REJECTED, ev.PROPOSAL_LOOP_DETECTED, ev.FINAL_REJECTED):
        default = {ev.PROPOSAL_LOOP_DETECTED: "loop guard", ev.FINAL_REJECTED: "final"}
        group.rejected = (_s(d, "layer", default.get(entry.event, "?")), _s(d, "code"))
    elif entry.event == ev.TOOL_COMPLETED:
        group.outcome = _s(d, "status")
        duration = d.get("duration_ms")
        group.duration_ms = duration if isinstance(duration, int) else None
    elif entry.event == ev.TOOL_RESULT_VALIDATED:
        group.verification = "verified" if d.get("verified") else "valid"
    elif entry.event == ev.TOOL_VERIFICATION_FAILED:
        group.verification = "verification failed"
    elif entry.event == ev.FINAL_VALIDATED:
        group.outcome = "final answer"


_OPENS_STEP = (ev.PLANNER_REQUESTED, ev.PLANNER_OUTPUT)


def build_timeline(events: Iterable[Mapping[str, Any]]) -> list[StepGroup]:
    """Group events (in sequence order) by step. A step opens at its model request
    (``planner.requested``) or, with none before it, at its ``planner.output``; everything
    else joins the current group."""
    groups: list[StepGroup] = []
    for event in events:
        entry = describe(event)
        opens = entry.event in _OPENS_STEP
        step = entry.details.get("step") if opens else None
        step = step if isinstance(step, int) else None
        if not groups or (opens and (groups[-1].step != step or step is None)):
            groups.append(StepGroup(step=step))
        _fold(groups[-1], entry)
        groups[-1].entries.append(entry)
    return groups
