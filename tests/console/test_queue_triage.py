"""The confirmation queue as a compact list (issue 24 item 2): filters, search, paging, the
risk-first order, the detail pane, and a bounded number of queries.

Personas (tests/support/personas.py): ``operator`` decides confirmations and sees the queue;
``alice`` and ``bob`` (users) own the waiting runs; ``reviewer`` may not open the queue (404).
Selectors are called as the page calls them; the page through Django's test client.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agentconsole import wiring
from policy import queue_list
from policy.domain.errors import DomainError
from policy.domain.registry import ToolRegistry
from runs import models as m
from runs.start import profiles
from runs.tools import demo_notice
from tests.api import api_kit as kit
from tests.support.queue_builders import pending

pytestmark = pytest.mark.django_db

QUEUE = "/confirmations/"


@pytest.fixture(autouse=True)
def no_run_limits(settings: Any) -> None:
    """A hundred waiting runs of one subject, made in a second: limits off for the set-up."""
    settings.AGENTCONSOLE_MAX_ACTIVE_RUNS_PER_SUBJECT = 0
    settings.AGENTCONSOLE_RUN_CREATE_RATE = ""


@pytest.fixture
def people() -> kit.People:
    kit.ensure_roles()
    return kit.People()


# The built-in tools and the demo's irreversible publish_notice (registered only with DEBUG on):
# a tool of each side-effect class.
REGISTRY = ToolRegistry([*wiring.builtin_contracts(), demo_notice.contract()])


def page_of(viewer: Any, **params: str) -> queue_list.QueuePage:
    return queue_list.queue_page(
        viewer=viewer,
        registry=REGISTRY,
        filters=queue_list.queue_filters(params),
        now=timezone.now(),
    )


def ids(page: queue_list.QueuePage) -> list[str]:
    return [r.confirmation_id for r in page.rows]


def signed_in(persona: kit.Persona) -> Client:
    client = Client()
    client.force_login(persona.user)
    return client


# --- filters and search ---------------------------------------------------------------------------


def test_each_filter_keeps_only_what_it_names(people: kit.People) -> None:
    alice, bob, op = people.alice.user, people.bob.user, people.operator.user
    plain = pending(alice, goal="plain")
    notice = pending(alice, tool="publish_notice", arguments={"text": "hello"})
    untrusted = pending(bob, untrusted=True, goal="from the forum")
    profiled = pending(bob, profile="research", goal="profiled")
    old = pending(alice, age=timedelta(days=2), goal="old one")
    unknown = pending(alice, tool="not_registered", arguments={})
    everything = {plain.pk, notice.pk, untrusted.pk, profiled.pk, old.pk, unknown.pk}
    assert set(ids(page_of(op))) == everything
    assert ids(page_of(op, tool="publish_notice")) == [notice.pk]
    assert ids(page_of(op, side_effect="irreversible")) == [notice.pk]
    assert ids(page_of(op, side_effect="unknown")) == [unknown.pk]
    assert set(ids(page_of(op, side_effect="idempotent-write"))) == everything - {
        notice.pk, unknown.pk
    }  # fmt: skip
    assert ids(page_of(op, untrusted="1")) == [untrusted.pk]
    assert untrusted.pk not in ids(page_of(op, untrusted="0"))
    assert ids(page_of(op, profile="research")) == [profiled.pk]
    assert set(ids(page_of(op, subject="bob"))) == {untrusted.pk, profiled.pk}
    assert ids(page_of(op, age="1d")) == [old.pk]
    assert ids(page_of(op, q="forum")) == [untrusted.pk]
    assert ids(page_of(op, q=notice.run_id)) == [notice.pk]
    assert ids(page_of(op, q="publish_")) == [notice.pk]
    assert page_of(op, subject="bob").total == 2
    assert page_of(op, subject="bob").all_pending == 6


@pytest.mark.parametrize(
    "params",
    [{"side_effect": "write"}, {"age": "3y"}, {"order": "newest"}, {"untrusted": "yes"},
     {"page": "0"}, {"page": "x"}, {"q": "x" * 101}],
)  # fmt: skip
def test_a_bad_filter_is_a_400_with_its_code(people: kit.People, params: dict[str, str]) -> None:
    with pytest.raises(DomainError) as refused:
        queue_list.queue_filters(params)
    assert refused.value.code == "QUEUE_FILTER_INVALID"
    response = signed_in(people.operator).get(QUEUE, params)
    assert response.status_code == 400
    assert "QUEUE_FILTER_INVALID" in response.content.decode()


def test_a_run_started_from_a_profile_records_its_name(people: kit.People) -> None:
    kit.profile_define(people.operator.user, "triage-profile")
    state = profiles.run_from_profile(
        user=people.alice.user, ref="triage-profile", goal="g", enqueue=False
    )
    assert m.Run.objects.get(pk=state.run_id).profile.name == "triage-profile"


# --- order and paging -----------------------------------------------------------------------------


def test_risk_first_puts_irreversible_then_untrusted_first(people: kit.People) -> None:
    alice, op = people.alice.user, people.operator.user
    write = pending(alice, age=timedelta(hours=3))
    untrusted_write = pending(alice, untrusted=True, age=timedelta(hours=2))
    notice = pending(alice, tool="publish_notice", arguments={"text": "x"})
    read = pending(alice, tool="search_public", arguments={"query": "q"}, age=timedelta(hours=4))
    assert ids(page_of(op)) == [read.pk, write.pk, untrusted_write.pk, notice.pk]
    assert ids(page_of(op, order="risk")) == [notice.pk, untrusted_write.pk, write.pk, read.pk]


def test_paging_past_the_first_hundred(people: kit.People) -> None:
    alice, op = people.alice.user, people.operator.user
    made = [
        pending(alice, age=timedelta(minutes=300 - i)).pk for i in range(queue_list.PAGE_SIZE + 5)
    ]
    first, second = page_of(op), page_of(op, page="2")
    assert ids(first) == made[: queue_list.PAGE_SIZE]
    assert ids(second) == made[queue_list.PAGE_SIZE :]
    assert (first.total, first.pages, second.first_shown, second.last_shown) == (105, 2, 101, 105)
    assert ids(page_of(op, page="3")) == []
    body = signed_in(people.operator).get(QUEUE, {"page": "2"}).content.decode()
    assert "page 2 of 2" in body
    assert f'data-q-row="{made[-1]}"' in body
    assert f'data-q-row="{made[0]}"' not in body


# --- bounded queries ------------------------------------------------------------------------------


def test_the_page_reads_in_a_fixed_number_of_queries(people: kit.People) -> None:
    """The list (rows, counts, identical groups, approved before, filter menus) and the
    selected item's detail cost the same for 3 waiting items as for 40."""
    alice, client = people.alice.user, signed_in(people.operator)
    for _ in range(3):
        pending(alice, arguments={"key": "same", "value": "1"})
    client.get(QUEUE)  # sessions, roles: warm
    with CaptureQueriesContext(connection) as few:
        assert client.get(QUEUE).status_code == 200
    for i in range(37):
        pending(alice, untrusted=i % 2 == 0, profile="pq" if i % 3 else "")
    with CaptureQueriesContext(connection) as many:
        body = client.get(QUEUE, {"order": "risk"}).content.decode()
    assert body.count("data-q-row=") == 40
    assert len(many) == len(few), [q["sql"] for q in many.captured_queries]


def test_the_selectors_alone_read_in_a_fixed_number_of_queries(people: kit.People) -> None:
    alice, op = people.alice.user, people.operator.user
    pending(alice)
    page_of(op)  # the registry's catalog stamp: warm
    with CaptureQueriesContext(connection) as one:
        page_of(op, order="risk", untrusted="0")
    for _ in range(30):
        pending(alice)
    with CaptureQueriesContext(connection) as many:
        page_of(op, order="risk", untrusted="0")
    # rows (with the last approved as a subquery), identical groups, filter menus (+ the
    # registry's stamp); the count and the unfiltered count only when the page is full or
    # filtered
    assert len(many) == len(one) <= 6, [q["sql"] for q in many.captured_queries]


# --- the page -------------------------------------------------------------------------------------


def test_the_list_is_compact_and_the_first_item_is_shown_in_detail(people: kit.People) -> None:
    alice = people.alice.user
    first = pending(alice, goal="first asked", age=timedelta(minutes=5))
    second = pending(alice, goal="second asked", untrusted=True)
    body = signed_in(people.operator).get(QUEUE).content.decode()
    assert body.index(f'data-q-row="{first.pk}"') < body.index(f'data-q-row="{second.pk}"')
    # One card: the first row's (the second's only when chosen).
    assert body.count("data-confirmation-id=") == 1
    assert f'data-confirmation-id="{first.pk}"' in body
    assert "untrusted source" in body  # the second row's marker
    chosen = signed_in(people.operator).get(QUEUE, {"item": second.pk}).content.decode()
    assert f'data-confirmation-id="{second.pk}"' in chosen
    assert 'class="q-split has-detail"' in chosen  # a phone shows the detail on its own


def test_the_detail_and_rows_fragments(people: kit.People) -> None:
    alice, client = people.alice.user, signed_in(people.operator)
    one, two = pending(alice), pending(alice, tool="publish_notice", arguments={"text": "x"})
    detail = client.get(f"{QUEUE}{two.pk}/detail/").content.decode()
    assert f'data-confirmation-id="{two.pk}"' in detail
    assert "<html" not in detail
    rows = client.get(f"{QUEUE}rows/", {"id": [one.pk, two.pk], "tool": "publish_notice"})
    text = rows.content.decode()
    assert f'data-q-row="{two.pk}"' in text
    assert f'data-q-row="{one.pk}"' not in text
    gone = client.get(f"{QUEUE}nonesuch/detail/").content.decode()
    assert "data-q-gone" in gone
    reviewer = signed_in(people.reviewer)
    assert reviewer.get(f"{QUEUE}rows/", {"id": one.pk}).status_code == 404
    assert reviewer.get(f"{QUEUE}{one.pk}/detail/").status_code == 404
