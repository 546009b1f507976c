"""The trace's hash chain (issue 23 item 5), no database: golden vectors pin scheme t1, and the
verifier names the first broken link of a chain edited, cut, reordered or erased."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from policy.domain.canonical import (
    TRACE_SCHEME,
    content_hash,
    trace_erase_seal,
    trace_event_digest,
    trace_link,
)
from policy.domain.errors import CanonicalError
from runs.domain import trace as ev
from runs.domain.trace_chain import GENESIS, Row, link_events, verify

RUN = "run-1"

# ---- golden vectors: scheme t1 ------------------------------------------------------------------

EVENT_TEXT = (
    '{"details":{"ms":12.5,"name":"重试","ok":true,"tool":"search_public"},'
    '"event":"tool.completed","proposal_id":"p1","run":"run-1"}'
)
EVENT_DIGEST = "ce17696a48bc8aeaf490055199dfa880fd9b8a726d412eaadbd8c3b6f11be66a"
FIRST_LINK = "b62f1eab6fc58cc0af93e03680dd82837d2c7c2c6b70fe61eec302c9bd6094b4"
STOPPED_DIGEST = "7bb97bdbf5e652507d982df7532b03f7628ae2c409b209b659153daa8083c7b2"
SECOND_LINK = "e664812af9c2d8dea0409eaf54e3df53bcb57654bc5c28274427e6371efb9fa4"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_the_trace_scheme_is_pinned():
    assert TRACE_SCHEME == "t1"


def test_golden_event_digest_is_the_c2_text_of_what_it_says():
    details = {"tool": "search_public", "ms": 12.50, "ok": True, "name": "重试"}
    digest = trace_event_digest(RUN, "tool.completed", "p1", details)
    assert digest == EVENT_DIGEST
    assert digest == _sha(EVENT_TEXT)  # 12.50 is spelled 12.5, keys sorted, UTF-8 kept raw
    assert trace_event_digest(RUN, "run.stopped", None, {}) == STOPPED_DIGEST


def test_golden_links():
    assert trace_link(GENESIS, EVENT_DIGEST) == FIRST_LINK
    assert _sha(f'{{"content":"{EVENT_DIGEST}","previous":""}}') == FIRST_LINK
    assert trace_link(FIRST_LINK, STOPPED_DIGEST) == SECOND_LINK


@given(
    st.text(alphabet="0123456789abcdef", max_size=64) | st.text(max_size=70),
    st.text(alphabet="0123456789abcdef", max_size=64) | st.text(max_size=70),
)
def test_the_link_shortcut_is_the_canonical_hash(previous, content):
    assume(all(not 0xD800 <= ord(ch) <= 0xDFFF for ch in previous + content))
    assert trace_link(previous, content) == content_hash(
        {"content": content, "previous": previous}, "c2"
    )


def test_golden_erase_seal():
    seal = trace_erase_seal([(1, EVENT_DIGEST), (3, STOPPED_DIGEST)])
    assert seal == "20efba211398e8a3f4e5f58608345c5743b855e6935405a82223403f2c9d3ff3"
    assert seal == _sha(f'{{"erased":[[1,"{EVENT_DIGEST}"],[3,"{STOPPED_DIGEST}"]]}}')
    assert trace_erase_seal([]) == _sha('{"erased":[]}')


def test_an_unknown_trace_scheme_is_refused():
    with pytest.raises(CanonicalError) as caught:
        trace_link("", EVENT_DIGEST, "t9")
    assert caught.value.code == "UNKNOWN_HASH_SCHEME"


# ---- linking and verifying ----------------------------------------------------------------------

DRAFTS = [
    ev.TraceDraft(ev.RUN_CREATED, None, {"goal_chars": 12}),
    ev.TraceDraft(ev.PROPOSAL_RECEIVED, "p1", {"tool": "search_public"}),
    ev.TraceDraft(ev.TOOL_STARTED, "p1", {"tool": "search_public"}),
    ev.TraceDraft(ev.TOOL_COMPLETED, "p1", {"status": "succeeded", "ms": 3.5}),
    ev.TraceDraft(ev.RUN_STOPPED, None, {"reason": "final"}),
]


def _chain(drafts: list[ev.TraceDraft] = DRAFTS) -> tuple[list[Row], str]:
    """Rows as two commits would store them (the second links from the first's head)."""
    first, head = link_events(RUN, GENESIS, drafts[:2])
    second, head = link_events(RUN, head, drafts[2:])
    assert head is not None
    rows = [
        Row(i, d.event, d.proposal_id, dict(d.details), link.content_digest, link.chain_digest)
        for i, (d, link) in enumerate(zip(drafts, first + second, strict=True), start=1)
    ]
    return rows, head


def test_linking_in_commits_equals_linking_at_once_and_reads_nothing():
    rows, head = _chain()
    links, whole = link_events(RUN, GENESIS, DRAFTS)
    assert whole == head
    assert [r.chain_digest for r in rows] == [link.chain_digest for link in links]
    assert verify(RUN, head, len(rows), rows).status == "verified"


def test_a_run_from_before_the_chain_is_not_chained_and_gets_no_digests():
    assert link_events(RUN, None, DRAFTS) == ([], None)
    verdict = verify(RUN, None, 5, [])
    assert (verdict.status, verdict.sequence) == ("not-chained", None)


def _named(rows: list[Row], head: str, trace_seq: int = 5) -> tuple[str, int | None, Any]:
    v = verify(RUN, head, trace_seq, rows)
    return v.status, v.sequence, v.what


@pytest.mark.parametrize(
    ("change", "sequence"),
    [
        ({"details": {"status": "failed", "ms": 3.5}}, 4),
        ({"event": ev.TOOL_RECOVERED}, 4),
        ({"proposal_id": "p2"}, 2),
    ],
)
def test_an_edited_event_is_named(change, sequence):
    rows, head = _chain()
    rows[sequence - 1] = dataclasses.replace(rows[sequence - 1], **change)
    assert _named(rows, head) == ("broken", sequence, "edited")


def test_an_edit_with_its_content_digest_recomputed_breaks_the_next_link():
    rows, head = _chain()
    details = {"status": "failed", "ms": 3.5}
    forged = trace_event_digest(RUN, ev.TOOL_COMPLETED, "p1", details)
    rows[3] = dataclasses.replace(rows[3], details=details, content_digest=forged)
    assert _named(rows, head) == ("broken", 4, "edited")


def test_a_deleted_event_is_missing_where_the_numbers_jump():
    rows, head = _chain()
    del rows[2]
    assert _named(rows, head) == ("broken", 3, "missing")


def test_a_deleted_last_event_is_missing_at_the_end():
    rows, head = _chain()
    assert _named(rows[:-1], head) == ("broken", 5, "missing")
    # The run's count rewritten too: its head still names the lost event.
    assert _named(rows[:-1], head, trace_seq=4) == ("broken", 4, "edited")


def test_swapped_events_are_reordered():
    rows, head = _chain()
    rows[1], rows[2] = (
        dataclasses.replace(rows[2], sequence=2),
        dataclasses.replace(rows[1], sequence=3),
    )
    assert _named(rows, head) == ("broken", 2, "reordered")


def test_events_renumbered_over_a_deleted_one_are_named_at_the_first_moved():
    rows, head = _chain()
    rows = rows[:1] + [dataclasses.replace(r, sequence=r.sequence - 1) for r in rows[2:]]
    assert _named(rows, head, trace_seq=4) == ("broken", 2, "edited")


def test_an_event_with_its_digests_removed_is_edited():
    rows, head = _chain()
    rows[0] = dataclasses.replace(rows[0], content_digest=None, chain_digest=None)
    assert _named(rows, head) == ("broken", 1, "edited")


def _erase(rows: list[Row], sequences: list[int], by: str = "alice") -> tuple[list[Row], str]:
    """What ``runs.privacy.erasure`` does: rewrite details, record erased digests, seal them in a
    new ``run.values-erased`` event linked after the last one."""
    out = []
    for r in rows:
        if r.sequence in sequences:
            details = dict.fromkeys(r.details, "[erased:hmac-sha256:0011223344556677]")
            digest = trace_event_digest(RUN, r.event, r.proposal_id, details)
            r = dataclasses.replace(r, details=details, erased_digest=digest)
        out.append(r)
    pairs = [(r.sequence, r.erased_digest) for r in out if r.erased_digest]
    details = {"by": by, "erased_events": len(pairs), "seal": trace_erase_seal(pairs)}
    previous = out[-1].chain_digest
    assert previous is not None
    [link], head = link_events(RUN, previous, [ev.TraceDraft(ev.RUN_VALUES_ERASED, None, details)])
    assert head is not None
    n = len(out) + 1
    out.append(Row(n, ev.RUN_VALUES_ERASED, None, details, link.content_digest, link.chain_digest))
    return out, head


def test_an_erase_keeps_the_chain_verifiable_even_twice_over_one_event():
    rows, _ = _chain()
    rows, head = _erase(rows, [1, 4])
    assert _named(rows, head, 6) == ("verified", None, None)
    rows, head = _erase(rows, [4, 5])
    assert _named(rows, head, 7) == ("verified", None, None)


def test_an_edit_dressed_as_an_erase_does_not_match_the_seal():
    rows, _ = _chain()
    rows, head = _erase(rows, [1])
    details = {"status": "failed", "ms": 3.5}
    forged = trace_event_digest(RUN, ev.TOOL_COMPLETED, "p1", details)
    rows[3] = dataclasses.replace(rows[3], details=details, erased_digest=forged)
    # The seal no longer matches the erased events: every one reads as rewritten, the first
    # named (the seal cannot say which of them was forged).
    assert _named(rows, head, 6) == ("broken", 1, "edited")


def test_an_erased_digest_after_the_last_seal_is_an_edit():
    rows, _ = _chain()
    rows, head = _erase(rows, [1])
    details = {**rows[5].details, "by": "mallory"}  # the erase's own event, its seal kept
    forged = trace_event_digest(RUN, ev.RUN_VALUES_ERASED, None, details)
    rows[5] = dataclasses.replace(rows[5], details=details, erased_digest=forged)
    assert _named(rows, head, 6) == ("broken", 6, "edited")
