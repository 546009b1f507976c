"""``GET /api/confirmations/<id>/``: its ``provenance`` says, per argument, where the value came
from as the runtime recorded it (issue 23 item 4), the same words as the queue's card.

A real run with the mail package (tests/support/mail_runs.py): ``send_email`` waits because its
recipient comes from the untrusted inbox; its subject comes from the goal, its body from alice's
saved signature.

Personas: ``alice`` owns the run (and may read its confirmation); ``operator`` reads every
confirmation; ``bob`` is an outsider (not found).
"""

from __future__ import annotations

import pytest

from tests.api import api_kit as kit
from tests.plugins import mail
from tests.support.mail_runs import SIGNATURE, mail_world, save_signature, waiting_send

pytestmark = pytest.mark.django_db(transaction=True)
world = pytest.fixture(autouse=True)(mail_world)


@pytest.fixture
def people() -> kit.People:
    kit.ensure_roles()
    return kit.People()


def test_the_detail_gives_each_arguments_origins_the_rule_and_why_it_waits(
    people: kit.People,
) -> None:
    save_signature(people.alice.user)
    cid = waiting_send().pending_confirmation_id
    for who in (people.operator, people.alice):
        prov = kit.assert_ok(who.get(f"/api/confirmations/{cid}/"))["provenance"]
        assert prov["recorded"] is True
        assert (prov["why"], prov["waits_for"], prov["overflow"]) == (
            "UNTRUSTED_PROVENANCE",
            ["to"],
            False,
        )
        leaves = {leaf["path"]: leaf for leaf in prov["leaves"]}
        to = leaves["to"]
        assert (to["untrusted"], to["rule"]) == (True, "confirm")
        assert to["rule_words"].startswith("rule confirm")
        (origin,) = to["origins"]
        assert (origin["kind"], origin["ref"], origin["tool"]) == (
            "untrusted",
            "tool-1",
            "inbox_read",
        )
        assert origin["words"] == "tool-1 (inbox_read): untrusted"
        assert mail.ATTACKER in origin["excerpt"]
        assert [o["kind"] for o in leaves["subject"]["origins"]] == ["goal"]
        assert leaves["body"]["words"] == "← preference signature (saved by the user)"
        assert leaves["body"]["untrusted"] is False
        # The preference's value is the argument the person approves; its record names the key.
        assert SIGNATURE not in str(leaves["body"]["origins"])
        assert prov["cited"] == [{"observation_id": "user-1", "trust": "user"}]


def test_an_outsider_gets_not_found(people: kit.People) -> None:
    cid = waiting_send().pending_confirmation_id
    kit.assert_error(people.bob.get(f"/api/confirmations/{cid}/"), 404, kit.NOT_FOUND)
