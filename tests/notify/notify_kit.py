"""What the notification tests share: a run that waits on a confirmation whose arguments hold
a secret, made through the real services (create, advance), and a delivery configuration with
short, exact timings."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from notify import services
from notify.domain.rules import Backoff
from runs import services as run_services
from runs.domain.budgets import RunBudgets
from runs.models import RunProfile
from tests.api.api_kit import profile_define
from tests.support.personas import make_user
from tests.support.planner import tool_call

# A value the redaction scanner knows for a secret, and one it does not: neither may reach a
# notification (they are argument values).
SECRET = "sk-live-9f8e7d6c5b4a39281716151413121110"
PLAIN_VALUE = "zh-CN"
GOAL = "Remember to answer in Chinese; my password is hunter2-notify"
T0 = datetime(2026, 12, 4, 12, 0, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Waiting:
    run_id: str
    confirmation_id: str


def config(*, base_s: float = 30, max_attempts: int = 3, timeout_s: float = 2) -> Any:
    return services.DeliveryConfig(
        public_url="https://console.example.test",
        timeout_s=timeout_s,
        backoff=Backoff(base_s=base_s, cap_s=3600, max_attempts=max_attempts),
        sender="agentconsole@example.test",
        lease_s=60,
    )


def waiting_run(
    owner: Any,
    *,
    profile: str = "research",
    proposal: dict[str, Any] | None = None,
    grants: list[dict[str, Any]] | None = None,
) -> Waiting:
    """A run of ``owner`` from ``profile`` (by name, defined by an operator when no profile has
    it) that proposes ``proposal`` (by default save_preference answer_language=zh-CN) and waits
    for a person; advanced in this process."""
    subject = owner.get_username()
    row = RunProfile.objects.filter(name=profile).first() or profile_define(
        make_user(f"op-{profile}", "operator"), profile
    )
    memory = {"capability": "memory:write", "resource_scope": subject, "expires_at_step": 10}
    language = {"key": "answer_language", "value": PLAIN_VALUE}
    preference = tool_call("p1", "save_preference", language)
    state = run_services.run_create(
        subject=subject,
        goal=GOAL,
        budgets=RunBudgets(max_steps=6, max_tool_calls=2, max_repeated_proposal=2,
                           deadline_ms=600_000),
        grants=grants or [memory],
        planner={"kind": "fixture", "outputs": [
            proposal or preference,
            {"kind": "final", "answer": "done", "citation_observation_ids": []},
        ]},
        owner=owner,
        profile=row,
    )  # fmt: skip
    waited = run_services.run_advance(run_id=state.run_id)
    assert waited is not None
    assert waited.status.value == "waiting_confirmation", waited
    assert waited.pending_confirmation_id is not None
    return Waiting(state.run_id, waited.pending_confirmation_id)


def secret_notice() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A ``publish_notice`` proposal (tests/support/approval_tools.py) whose text holds SECRET,
    and its grant."""
    text = f"Rotate the key {SECRET} tonight"
    grant = {"capability": "notice:publish", "resource_scope": "*", "expires_at_step": 10}
    return tool_call("p1", "publish_notice", {"text": text}), [grant]
