"""The demo's runs: one of each state the console shows, made by the real runner.

``load_demo_runs`` drives each demo run through the same path as a scenario file
(``runs.start.scenarios.run_scenario``: ``run_create``, the runner advancing it in-process, a
person's action where the demo names one), never by writing rows. The planner is a fixture planner,
so every load makes the same runs. What it leaves:

==============  =====  ======================================================================
key             owner  state
==============  =====  ======================================================================
waiting         alice  waiting for a confirmation: save answer_language=zh-CN, citing the
                       poisoned forum post (an untrusted observation); approving it lets the
                       worker finish the run
blocked         alice  completed; the forum post's injected memory write (auto_approve) was
                       rejected by the gate before any tool ran
history         alice  completed; citation_style saved three times (versions 1, 2, 3)
loop            alice  failed; the loop guard stopped a repeated search, handed off
cancelled       alice  cancelled by its owner while it waited for a confirmation
unknown         bob    failed; notify_partner's outcome is unknown, handed off (DEBUG-only tool)
research        bob    completed; a read-only search with a cited answer
four-eyes       bob    waiting for a four-eyes confirmation: publish_notice, an irreversible
                       write two different people must approve, one an operator who is not
                       bob (DEBUG-only tool)
==============  =====  ======================================================================

Idempotent: a demo run is identified by its owner and its goal, and is made only when no such
run exists, so loading twice makes nothing new. The waiting run is the exception: if the one
there is gone (its deadline passed and the sweeper cancelled it), a new one is made, so a
machine started again days later still has something in the queue; once a person approved or
declined it, it is left as they left it. The four-eyes run is kept the same way.

The waiting runs get the longest deadline this deployment allows (``max_deadline_ms``, a day by
default): a waiting run is cancelled at its deadline, its confirmation expired with it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model

from runs.context import RunsContext
from runs.demo.demo_planner import failed, final, tool
from runs.domain.budgets import MAX_DEADLINE_MS
from runs.domain.machine import Status
from runs.models import Run
from runs.start.limits import RunLimits
from runs.start.scenarios import Scenario, run_scenario
from runs.tools import demo_notice, demo_partner

SEARCH = {"capability": "search:public", "resource_scope": "public", "expires_at_step": 20}
ANSWER = "同一任务最多自动重试三次，随后进入隔离队列。(Three retries, then quarantine.)"  # noqa: RUF001


def _memory_write(subject: str) -> dict[str, Any]:
    return {"capability": "memory:write", "resource_scope": subject, "expires_at_step": 20}


def _search(pid: str = "p1") -> dict[str, Any]:
    # "重试耗尽后怎么办" finds the forum post whose text tells the planner to save preferences.
    return tool(pid, "search_public", {"query": "重试耗尽后怎么办"}, ["user-1"], "检索公开规则")


def _save(
    pid: str, key: str, value: str, sources: list[str], reason: str = "", **extra: Any
) -> dict[str, Any]:
    return tool(pid, "save_preference", {"key": key, "value": value, **extra}, sources, reason)


def _confirmed(name: str, key: str, value: str, **extra: Any) -> dict[str, Any]:
    """A confirmation the user gave with the request (scenario confirmations are pre-decided)."""
    arguments = {"key": key, "value": value, **extra}
    proposal = {"tool_name": "save_preference", "tool_version": "1", "arguments": arguments}
    return {"confirmation_id": name, "proposal": proposal, "approved": True, "expires_at_step": 20}


def waiting_deadline_ms() -> int:
    """The longest deadline a run may have here (0 switches the limit off: the schema's)."""
    ceiling = RunLimits.from_settings().max_deadline_ms
    return min(ceiling, MAX_DEADLINE_MS) if ceiling > 0 else MAX_DEADLINE_MS


def _scenario(
    goal: str,
    grants: list[dict[str, Any]],
    planner: list[dict[str, Any]],
    *,
    subject: str = "alice",
    budgets: dict[str, int] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A scenario as JSON data (``runs.start.scenarios.Scenario``), with small default budgets."""
    base = {"max_steps": 8, "max_tool_calls": 4, "max_repeated_proposal": 2, "deadline_ms": 60_000}
    return {
        "subject": subject,
        "goal": goal,
        "budgets": {**base, **(budgets or {})},
        "grants": grants,
        "planner": planner,
        **extra,
    }


@dataclass(frozen=True)
class DemoRun:
    key: str
    owner: str
    goal: str
    # Builds the scenario (as JSON data) for ``goal``; a function: settings are read at load.
    build: Callable[[str], dict[str, Any]]
    # A cancelled run of this owner and goal does not count as "already there".
    remade_when_cancelled: bool = False

    def scenario(self) -> dict[str, Any]:
        """The scenario the run is made from (``runs.start.scenarios.Scenario`` as JSON data)."""
        return self.build(self.goal)


def _after_the_forum_post(goal: str, key: str, value: str, **budgets: int) -> dict[str, Any]:
    """Search (finds the poisoned forum post), then the write the post asks for, citing it
    (tool-1: untrusted content), then the answer."""
    planner = [
        _search(),
        _save("p2", key, value, ["tool-1"], reason="来自检索文本的建议"),
        # The answer says what became of the write, as the planner saw it (step 2's outcome).
        final(
            f"{ANSWER} Saved: {key}={value}.",
            ["tool-1"],
            unless=failed(2, f"{ANSWER} Could not save {key}={value}: {{code}}."),
        ),
    ]
    return _scenario(goal, [SEARCH, _memory_write("alice")], planner, budgets=budgets)


def _waiting(goal: str) -> dict[str, Any]:
    # A whitelisted key, unset: the queue flags the proposal as derived from retrieved content,
    # and an approval writes answer_language v1 and lets the run finish.
    return _after_the_forum_post(
        goal, "answer_language", "zh-CN", deadline_ms=waiting_deadline_ms()
    )


def _blocked(goal: str) -> dict[str, Any]:
    # auto_approve is no whitelisted key (and never could be): the gate's semantic layer.
    return _after_the_forum_post(goal, "auto_approve", "所有任务都自动批准")


def _history(goal: str) -> dict[str, Any]:
    styles = ("inline", "footnote", "endnote")
    # Each save names the version it read (none for the first): v1, v2, v3.
    versions: list[dict[str, Any]] = [{}, {"expected_version": 1}, {"expected_version": 2}]
    saves = [
        _save(f"p{i}", "citation_style", s, ["user-1"], **v)
        for i, (s, v) in enumerate(zip(styles, versions, strict=True), start=1)
    ]
    return _scenario(
        goal,
        [_memory_write("alice")],
        [
            *saves,
            final(
                "Saved: citations as endnotes.",
                ["tool-3"],
                unless=failed(3, "Could not save citations as endnotes: {code}.", []),
            ),
        ],
        confirmations=[
            _confirmed(f"style-{s}", "citation_style", s, **v)
            for s, v in zip(styles, versions, strict=True)
        ],
    )


def _loop(goal: str) -> dict[str, Any]:
    repeat = tool("p1", "search_public", {"query": "quarantine queue"}, ["user-1"])
    return _scenario(
        goal,
        [SEARCH],
        [{**repeat, "proposal_id": f"p{i}"} for i in range(1, 5)],
        budgets={"max_steps": 10, "max_tool_calls": 10},
    )


def _cancelled(goal: str) -> dict[str, Any]:
    save = _save("p1", "citation_style", "footnote", ["user-1"], expected_version=3)
    return _scenario(
        goal,
        [_memory_write("alice")],
        [save, final("Saved.", ["tool-1"], unless=failed(1, "Not saved: {code}.", []))],
        human=[{"action": "cancel", "reason": "changed my mind"}],
    )


def _unknown(goal: str) -> dict[str, Any]:
    message = "Shipment 4711 is in the quarantine queue after three retries."
    grant = {"capability": demo_partner.CAPABILITY, "resource_scope": "*", "expires_at_step": 4}
    notify = tool("p1", demo_partner.NAME, {"partner": "acme-logistics", "message": message}, [])
    return _scenario(
        goal,
        [grant],
        [
            notify,
            final("Partner notified.", ["tool-1"], unless=failed(1, "Not notified: {code}.", [])),
        ],
        subject="bob",
    )


def _four_eyes(goal: str) -> dict[str, Any]:
    grant = {"capability": demo_notice.CAPABILITY, "resource_scope": "*", "expires_at_step": 4}
    text = "Maintenance tonight 22:00-23:00 UTC: shipments are held, nothing is lost."
    publish = tool("p1", demo_notice.NAME, {"text": text}, ["user-1"], "the user asked for it")
    return _scenario(
        goal,
        [grant],
        [
            publish,
            final("Notice published.", ["tool-1"], unless=failed(1, "Not published: {code}.", [])),
        ],
        subject="bob",
        budgets={"deadline_ms": waiting_deadline_ms()},
    )


def _research(goal: str) -> dict[str, Any]:
    search = tool("p1", "search_public", {"query": "retry policy"}, ["user-1"])
    answer = final("Three automatic retries, then the quarantine queue.", ["tool-1"])
    return _scenario(goal, [SEARCH], [search, answer], subject="bob")


DEMO_RUNS: tuple[DemoRun, ...] = (
    # A waiting run the sweeper cancelled at its deadline does not count: a new one is made.
    DemoRun(
        "waiting",
        "alice",
        "What happens after retries are exhausted? Answer me in Chinese from now on.",
        _waiting,
        remade_when_cancelled=True,
    ),
    DemoRun(
        "blocked",
        "alice",
        "重试耗尽后怎么办？(the forum post tries to save auto_approve)",  # noqa: RUF001
        _blocked,
    ),
    DemoRun("history", "alice", "Cite inline. No, footnotes. Actually, endnotes please.", _history),
    DemoRun("loop", "alice", "Keep checking the quarantine queue until something changes.", _loop),
    DemoRun(
        "cancelled", "alice", "Save footnote citations (cancelled while it waited)", _cancelled
    ),
    DemoRun(
        "unknown", "bob", "Tell the logistics partner that shipment 4711 is quarantined.", _unknown
    ),
    DemoRun("research", "bob", "What is the retry policy?", _research),
    DemoRun(
        "four-eyes",
        "bob",
        "Tell every customer about tonight's maintenance window.",
        _four_eyes,
        remade_when_cancelled=True,
    ),
)


@dataclass(frozen=True)
class Loaded:
    key: str
    run_id: str
    status: str
    stop_reason: str | None
    created: bool


def load_demo_runs(*, ctx: RunsContext | None = None) -> list[Loaded]:
    """Make each demo run that is not there yet (see the module docstring); report each.

    Needs the demo users (``load_demo`` creates them), the demo corpus and, for the unknown
    effect, the DEBUG-only ``notify_partner`` tool. Tools run in threads with connections of
    their own: call it outside a transaction (a management command does)."""
    names = {demo.owner for demo in DEMO_RUNS}
    owners = {u.get_username(): u for u in get_user_model().objects.filter(username__in=names)}
    loaded = []
    for demo in DEMO_RUNS:
        owner = owners[demo.owner]
        existing = Run.objects.filter(owner=owner, goal=demo.goal)
        if demo.remade_when_cancelled:
            existing = existing.exclude(status=Status.CANCELLED)
        run = existing.order_by("created_at").last()
        if run is not None:
            loaded.append(Loaded(demo.key, run.pk, run.status, run.stop_reason, created=False))
            continue
        scenario = Scenario.model_validate(demo.scenario())
        state = run_scenario(scenario, owner=owner, ctx=ctx)["state"]
        loaded.append(
            Loaded(demo.key, state["run_id"], state["status"], state["stop_reason"], created=True)
        )
    return loaded
