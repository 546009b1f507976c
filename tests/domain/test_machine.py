"""The run state machine: one table; anything else raises; terminal states accept nothing."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runs.domain.errors import IllegalTransition
from runs.domain.machine import TERMINAL, TRANSITIONS, Event, Status, allowed_events, transition

ALL_PAIRS = list(itertools.product(Status, Event))
ILLEGAL = [pair for pair in ALL_PAIRS if pair not in TRANSITIONS]

# The seed's §7 diagram, written out independently of the table under test:
# status, event -> the status it leads to. (edited, responded: a person's edit of the waiting
# proposal, or a note instead of a decision; issue 24 item 1.)
SEED_DIAGRAM = """
created               start                 running
created               cancel_requested      cancelled
created               fail                  failed
running               step                  running
running               needs_confirmation    waiting_confirmation
running               final_validated       completed
running               cancel_requested      cancelling
running               fail                  failed
running               deadline_reached      failed
running               deadline_during_tool  cancelling
waiting_confirmation  confirmed             running
waiting_confirmation  declined              running
waiting_confirmation  edited                running
waiting_confirmation  responded             running
waiting_confirmation  deadline_reached      cancelled
waiting_confirmation  cancel_requested      cancelled
cancelling            effects_checked       cancelled
cancelling            unknown_effect        failed
"""
EXPECTED = {
    (Status(status), Event(event)): Status(to)
    for status, event, to in (line.split() for line in SEED_DIAGRAM.strip().splitlines())
}


def test_table_matches_seed_diagram():
    assert dict(TRANSITIONS) == EXPECTED


@pytest.mark.parametrize(("status", "event"), list(EXPECTED))
def test_legal_transitions(status, event):
    assert transition(status, event) is EXPECTED[(status, event)]
    # string spellings are accepted and give the same answer
    assert transition(status.value, event.value) is EXPECTED[(status, event)]


@pytest.mark.parametrize(("status", "event"), ILLEGAL)
def test_every_other_pair_raises(status, event):
    with pytest.raises(IllegalTransition) as exc:
        transition(status, event)
    assert exc.value.code == "ILLEGAL_TRANSITION"
    assert exc.value.extra == {"status": status.value, "event": event.value}


def test_illegal_pairs_are_most_of_the_space():
    assert len(ILLEGAL) == len(Status) * len(Event) - len(EXPECTED)


@pytest.mark.parametrize("status", sorted(TERMINAL))
def test_terminal_states_accept_nothing(status):
    assert allowed_events(status) == frozenset()
    for event in Event:
        with pytest.raises(IllegalTransition):
            transition(status, event)


def test_terminal_set():
    assert frozenset({Status.COMPLETED, Status.FAILED, Status.CANCELLED}) == TERMINAL


@pytest.mark.parametrize(
    ("status", "event"),
    [("paused", "start"), ("running", "explode"), ("", ""), (None, "start"), ("RUNNING", "step")],
)
def test_unknown_status_or_event_raises_illegal_transition(status, event):
    with pytest.raises(IllegalTransition):
        transition(status, event)


def test_every_non_terminal_status_is_reachable_and_can_end():
    reachable = {Status.CREATED}
    frontier = [Status.CREATED]
    while frontier:
        status = frontier.pop()
        for event in allowed_events(status):
            nxt = transition(status, event)
            if nxt not in reachable:
                reachable.add(nxt)
                frontier.append(nxt)
    assert reachable == set(Status)
    for status in set(Status) - TERMINAL:
        assert allowed_events(status)


@settings(max_examples=200, deadline=None)
@given(events=st.lists(st.sampled_from(list(Event)), max_size=40))
def test_random_event_sequences_follow_the_table(events):
    status = Status.CREATED
    ended = False
    for event in events:
        expected = EXPECTED.get((status, event))
        if expected is None:
            with pytest.raises(IllegalTransition):
                transition(status, event)
            continue
        assert not ended, "a terminal status accepted an event"
        status = transition(status, event)
        assert status is expected
        assert isinstance(status, Status)
        if status in TERMINAL:
            ended = True
        elif ended:
            pytest.fail("left a terminal status")
    assert status in set(Status)
    if ended:
        assert status in TERMINAL
