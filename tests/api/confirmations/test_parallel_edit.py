"""An edit and an approval of one confirmation at the same moment, over real HTTP on
PostgreSQL (issue 24 item 1): both take the run's row lock, so exactly one wins; the other is
told who answered first (409), and the run resumes once, with either the edited call or the
original, never both.
"""

from __future__ import annotations

from typing import Any

import pytest

from policy.models import Confirmation
from runs import models as m
from tests.api import api_kit as kit
from tests.api.confirmations.test_parallel_approvals import post_json
from tests.support.races import race

ROUNDS = 3


@pytest.mark.django_db(transaction=True)
def test_edit_and_approve_at_once_exactly_one_wins(
    postgres_only: None, live_server: Any, people: kit.People, enqueued: list
) -> None:
    for _ in range(ROUNDS):
        waiting = kit.waiting_run(people.alice.user)
        base = f"{live_server.url}/api/confirmations/{waiting.confirmation_id}"
        calls = [
            (
                f"{base}/edit/",
                people.operator.token,
                {
                    "proposal_hash": waiting.proposal_hash,
                    "arguments": {"key": "answer_language", "value": "fr-FR"},
                },
            ),
            (f"{base}/approve/", people.operator2.token, {"proposal_hash": waiting.proposal_hash}),
        ]
        answers = race(lambda i: post_json(*calls[i]), len(calls), join_s=120)  # noqa: B023
        errors = [a for a in answers if isinstance(a, BaseException)]
        assert not errors, errors
        statuses = [status for status, _ in answers]
        assert sorted(statuses) == [200, 409], answers
        (loser,) = [body for status, body in answers if status == 409]
        assert loser["code"] in ("CONFIRMATION_NOT_PENDING", "CONFIRMATION_HASH_MISMATCH")
        row = kit.confirmation_row(waiting.confirmation_id)
        edits = Confirmation.objects.filter(edited_from=waiting.confirmation_id)
        if statuses[0] == 200:  # the edit won
            assert row.status == "edited"
            assert edits.count() == 1
            assert (
                kit.events_of(waiting.run_id, "confirmation.decided")[0].details["by"] == "operator"
            )
        else:  # the approval won
            assert row.status == "approved"
            assert not edits.exists()
            assert kit.events_of(waiting.run_id, "confirmation.edited") == []
        run = m.Run.objects.get(pk=waiting.run_id)
        assert (run.status, run.version) == ("running", waiting.version + 1)
        assert enqueued.count(waiting.run_id) == 1
