"""20 operators approve the same confirmation at the same moment, over real HTTP (pytest-django's
threaded live server, token auth), on PostgreSQL: exactly one 200, nineteen 409
CONFIRMATION_NOT_PENDING, one decision stored (by the winner), one ``confirmation.decided`` event,
and the run resumed once (waiting_confirmation → running once, one version bump, one enqueue)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from runs import models as m
from tests.api import api_kit as kit
from tests.support.races import race

N = 20


def post_json(url: str, token: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(  # noqa: S310 - the live server's own http:// URL
        url,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


@pytest.mark.django_db(transaction=True)
def test_twenty_parallel_approvals_decide_once(
    postgres_only: None, live_server: Any, people: kit.People, enqueued: list
) -> None:
    waiting = kit.waiting_run(people.alice.user)
    operators = [kit.make_persona(f"op{i:02d}", roles=("operator",)) for i in range(N)]
    url = f"{live_server.url}/api/confirmations/{waiting.confirmation_id}/approve/"
    answers = race(
        lambda i: post_json(url, operators[i].token, {"proposal_hash": waiting.proposal_hash}),
        N,
        join_s=120,
    )
    errors = [a for a in answers if isinstance(a, BaseException)]
    assert not errors, errors
    results: dict[str, tuple[int, dict[str, Any]]] = {
        op.name: answer for op, answer in zip(operators, answers, strict=True)
    }
    assert len(results) == N

    statuses = sorted(status for status, _ in results.values())
    assert statuses == [200] + [409] * (N - 1), results
    (winner,) = [name for name, (status, _) in results.items() if status == 200]
    body = results[winner][1]
    assert (body["status"], body["decided_by"]) == ("approved", winner)
    for name, (status, body) in results.items():
        if status == 409:
            assert set(body) == {"code", "message", "extra"}, (name, body)
            assert body["code"] == kit.CONFIRMATION_NOT_PENDING, (name, body)
            # Each loser is told who won, whichever check refused it (issue 11 item 3).
            assert body["message"].startswith(f"Already decided by {winner} (approved)"), body

    # One decision stored, by the winner.
    row = kit.confirmation_row(waiting.confirmation_id)
    assert row.status == "approved"
    assert row.decided_by.get_username() == winner
    decided = kit.events_of(waiting.run_id, "confirmation.decided")
    assert [e.details["by"] for e in decided] == [winner]

    # The run resumed once: one transition out of waiting_confirmation, one version bump, one
    # enqueue for a worker.
    run = m.Run.objects.get(pk=waiting.run_id)
    assert run.status == "running"
    assert run.version == waiting.version + 1
    resumed = [
        e
        for e in kit.events_of(waiting.run_id, "state.transitioned")
        if e.details == {"from": "waiting_confirmation", "to": "running"}
    ]
    assert len(resumed) == 1
    assert enqueued.count(waiting.run_id) == 1
