"""Which commands fit a handoff and who may resolve it (runs/domain/handoff.py): the one rule the
API, the console page and the service share."""

from __future__ import annotations

import pytest

from runs.domain.handoff import (
    RESOLUTION_ACTIONS,
    RESOLUTION_TEXT,
    allowed_resolutions,
    resolution_refusal,
    resolver_refusal,
)


@pytest.mark.parametrize(
    ("effect_status", "can_compensate", "allowed"),
    [
        (None, True, ["cancel", "fail"]),
        (None, False, ["cancel", "fail"]),
        ("unknown", False, ["retry_same_token", "mark_effect_present", "mark_effect_absent",
                            "cancel", "fail"]),
        ("unknown", True, list(RESOLUTION_ACTIONS)),
        ("started", False, ["retry_same_token", "mark_effect_present", "mark_effect_absent",
                            "cancel", "fail"]),
        ("compensation-required", True, ["mark_effect_present", "compensate", "cancel", "fail"]),
        ("compensation-required", False, ["mark_effect_present", "cancel", "fail"]),
    ],
)  # fmt: skip
def test_allowed_resolutions(
    effect_status: str | None, can_compensate: bool, allowed: list[str]
) -> None:
    assert allowed_resolutions(effect_status=effect_status, can_compensate=can_compensate) == (
        allowed
    )


@pytest.mark.parametrize(
    ("action", "effect_status", "can_compensate", "code"),
    [
        ("set_status_completed", "unknown", True, "HANDOFF_ACTION_UNKNOWN"),
        ("", None, False, "HANDOFF_ACTION_UNKNOWN"),
        ("mark_effect_present", None, True, "HANDOFF_NO_EFFECT"),
        ("compensate", "unknown", False, "COMPENSATION_NOT_SUPPORTED"),
        ("mark_effect_absent", "compensation-required", True, "HANDOFF_ACTION_NOT_ALLOWED"),
        ("retry_same_token", "compensation-required", True, "HANDOFF_ACTION_NOT_ALLOWED"),
    ],
)
def test_refusals_carry_a_stable_code(
    action: str, effect_status: str | None, can_compensate: bool, code: str
) -> None:
    refusal = resolution_refusal(action, effect_status=effect_status, can_compensate=can_compensate)
    assert refusal is not None
    assert refusal[0] == code
    assert refusal[1]


def test_every_action_has_words_for_people() -> None:
    assert set(RESOLUTION_TEXT) == set(RESOLUTION_ACTIONS)


@pytest.mark.parametrize(
    ("status", "assignee", "user", "admin", "refusal"),
    [
        ("claimed", 1, 1, False, None),  # the claimant
        ("claimed", 1, 2, False, "PERMISSION_DENIED"),  # another reviewer
        ("claimed", 1, 2, True, None),  # an admin stands in
        ("claimed", None, 2, False, None),  # claimed by a scenario name, no account
        ("open", None, 1, False, "HANDOFF_NOT_CLAIMED"),
        ("open", None, 1, True, "HANDOFF_NOT_CLAIMED"),
        ("resolved", 1, 1, False, "HANDOFF_NOT_CLAIMED"),
    ],
)
def test_who_may_resolve(
    status: str, assignee: int | None, user: int, admin: bool, refusal: str | None
) -> None:
    assert (
        resolver_refusal(status=status, assignee_id=assignee, user_id=user, user_is_admin=admin)
        == refusal
    )
