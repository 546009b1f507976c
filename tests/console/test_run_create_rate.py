"""issue 21 item 7: ``/runs/new/`` starts runs under the same per-user creation rate as
``POST /api/runs/`` (``AGENTCONSOLE_RUN_CREATE_RATE``). Before, only the API counted: 36 runs
started one after the other on the page were 36 runs.

Personas: ``operator`` (defines the profiles), ``alice`` and ``bob`` (users who start runs).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from runs import services
from runs.demo.demo_profiles import load_demo_profiles
from runs.models import Run, RunProfile
from runs.start import limits
from tests.support.personas import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(services, "enqueue_advance", lambda run_id, **kw: None)


@pytest.fixture(autouse=True)
def only_the_rate(settings: Any) -> None:
    """The rate alone limits these runs (none of them finishes: no worker runs)."""
    settings.AGENTCONSOLE_MAX_ACTIVE_RUNS_PER_SUBJECT = 0


operator = pytest.fixture(name="operator")(lambda: make_user("operator", "operator"))
alice = pytest.fixture(name="alice")(lambda: make_user("alice", "user"))
bob = pytest.fixture(name="bob")(lambda: make_user("bob", "user"))


@pytest.fixture
def research(operator: Any) -> str:
    load_demo_profiles(by=operator)
    return str(RunProfile.objects.get(name="research").pk)


def signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_page_refuses_runs_over_the_rate(
    settings: Any, alice: Any, bob: Any, research: str
) -> None:
    """36 runs started one after the other at 30 an hour: 30 runs; each of the other 6 is the
    form again with RUN_CREATE_THROTTLED, a 429 with Retry-After, and the goal kept."""
    settings.AGENTCONSOLE_RUN_CREATE_RATE = "30/hour"
    page = signed_in(alice)
    answers = [
        page.post("/runs/new/", {"profile": research, "goal": f"goal {i}"}) for i in range(36)
    ]
    assert [a.status_code for a in answers] == [302] * 30 + [429] * 6
    assert Run.objects.filter(subject="alice").count() == 30
    refused = answers[-1]
    html = refused.content.decode()
    assert "RUN_CREATE_THROTTLED" in html
    assert "Too many runs started" in html
    assert "goal 35</textarea>" in html  # the form again, with what was typed
    assert 0 < int(refused["Retry-After"]) <= 3600
    # Per user: bob starts his run.
    assert signed_in(bob).post("/runs/new/", {"profile": research, "goal": "g"}).status_code == 302


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0  # the start of a minute

    def __call__(self) -> float:
        return self.now


def test_the_page_and_the_api_share_one_count(
    settings: Any, monkeypatch: pytest.MonkeyPatch, alice: Any, research: str
) -> None:
    """20 runs by the API and 10 on the page use up 30 a minute: the next is refused on either
    door, until the window has moved on."""
    settings.AGENTCONSOLE_RUN_CREATE_RATE = "30/min"
    clock = Clock()
    real = limits.create_rate_window
    monkeypatch.setattr(limits, "create_rate_window", lambda s: real(s, clock=clock))
    api = APIClient()
    api.force_authenticate(alice)

    def api_start(goal: str) -> Any:
        return api.post("/api/runs/", {"goal": goal, "profile": research}, format="json")

    for i in range(20):
        assert api_start(f"{i}").status_code == 201
    page = signed_in(alice)
    for i in range(10):
        assert page.post("/runs/new/", {"profile": research, "goal": f"{i}"}).status_code == 302
    refused = page.post("/runs/new/", {"profile": research, "goal": "one more"})
    assert refused.status_code == 429
    wait = int(refused["Retry-After"])
    api_refused = api_start("one more")
    assert api_refused.status_code == 429
    assert api_refused.json()["code"] == "RUN_CREATE_THROTTLED"
    assert Run.objects.count() == 30
    clock.now += wait
    assert page.post("/runs/new/", {"profile": research, "goal": "later"}).status_code == 302
