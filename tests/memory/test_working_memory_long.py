"""Working memory over a long run (seed §2.2; issue 4 item 1): forty searches, and the working
memory — so the planner's context — stays bounded (at most 12 items, 6000 characters, nothing
expired), the same size at step 40 as at step 10, and equal at every step to a replay of the
observations known then.

The planner's context is captured as the runner builds it (a spy around ``Runner.context``), so
"what the planner got at step N" is observed, not recomputed.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from memory.domain.working import MAX_CHARS, MAX_ITEMS, rebuild
from memory.models import WorkingMemoryItem
from memory.services import working_memory_rebuild
from runs.domain.runner import Runner
from runs.tools.corpus import document_load
from tests.memory.memory_kit import (
    as_rows,
    content_chars,
    observations_of,
    run_file,
    stored_items,
    view_of,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def planner_views(monkeypatch) -> dict[int, dict[str, Any]]:
    """state.step → what the runner handed the planner for the next step (and the DB then)."""
    seen: dict[int, dict[str, Any]] = {}
    original = Runner.context

    def spy(self, state, **kwargs):
        context = original(self, state, **kwargs)
        rows = WorkingMemoryItem.objects.filter(run_id=state.run_id)
        seen[state.step] = {
            "observations": context.observations,
            "db_items": rows.count(),
            "db_chars": sum(len(c) for c in rows.values_list("content", flat=True)),
        }
        return context

    monkeypatch.setattr(Runner, "context", spy)
    return seen


RUNBOOK = "\n\n".join(
    f"Retry step {n}: when a task fails, the retry policy decides; after the third retry the task "
    "moves to the quarantine queue, where the on-call operator reviews the task, its trace and its "
    "idempotency token before anything runs again. " * 2
    for n in range(1, 13)
)


@pytest.mark.parametrize("corpus_size", ["demo", "demo+runbook"])
def test_forty_searches_keep_the_working_memory_and_the_planner_context_bounded(
    corpus, planner_views, tmp_path, corpus_size
):
    if corpus_size == "demo+runbook":
        # Twelve long matching paragraphs: every search summary fills its 1000 characters, so
        # the character cap (not only the expiry) is what bounds the view.
        path = tmp_path / "retry-runbook.md"
        path.write_text("# Retry runbook\n\n" + RUNBOOK, encoding="utf-8")
        document_load(path=path)
    result = run_file("mem-working-memory-long")
    run_id = result.run_id

    assert result.status == "completed", result.codes()
    assert (result.state["step"], result.state["tool_calls"]) == (41, 40)
    searches = {e["details"]["tool"] for e in result.events("proposal.received")}
    assert searches == {"search_public"}
    assert len({o["content"]["value"]["query"] for o in result.observations[1:]}) == 40

    # What the planner got at every one of its 41 steps stayed within the caps, unexpired.
    assert sorted(planner_views) == list(range(41))
    for step, seen in planner_views.items():
        items = seen["observations"]
        assert len(items) <= MAX_ITEMS, step
        assert content_chars(items) <= MAX_CHARS, step
        assert seen["db_items"] <= MAX_ITEMS, step
        assert seen["db_chars"] <= MAX_CHARS, step
        for i in items:
            assert i["expires_after_step"] is None or i["expires_after_step"] >= step, (step, i)
        # The view equals a replay of the observations known at that step.
        known = [o for o in observations_of(run_id) if o["step"] <= step]
        assert as_rows(items) == as_rows(rebuild(known, step=step)), step

    # Bounded: the planner's context at step 40 is the size it was at step 10.
    at_10, at_40 = planner_views[9]["observations"], planner_views[39]["observations"]
    assert len(at_10) == len(at_40)
    assert content_chars(at_10) == content_chars(at_40)
    size_10 = len(json.dumps(at_10, ensure_ascii=False))
    size_40 = len(json.dumps(at_40, ensure_ascii=False))
    assert abs(size_40 - size_10) <= 4 * len(at_40), (size_10, size_40)  # ids: tool-9 → tool-39
    (out_10,) = [e for e in result.events("planner.output") if e["details"]["step"] == 10]
    (out_40,) = [e for e in result.events("planner.output") if e["details"]["step"] == 40]
    assert out_10["details"]["context_items"] == out_40["details"]["context_items"] == len(at_40)
    ids_40 = [i["item_id"] for i in at_40]
    if corpus_size == "demo":
        # Small results: the expiry bounds the view (the request never expires).
        assert ids_40 == ["wm-user-1"] + [f"wm-tool-{n}" for n in range(31, 40)]
    else:
        # Full summaries: the character cap evicted the oldest, the user's request included.
        assert "wm-user-1" not in ids_40
        assert content_chars(at_40) > MAX_CHARS - 1_000
        assert ids_40 == [f"wm-tool-{n}" for n in range(40 - len(ids_40), 40)]
    # The planner sees evidence summaries that still name what they summarize: citation ids.
    results = {
        o["observation_id"]: o["content"]["value"]["results"] for o in result.observations[1:]
    }
    for i in at_40:
        if i["kind"] == "evidence-summary":
            (source,) = i["source_ids"]
            assert results[source], source
            assert i["content"].startswith(f"[{results[source][0]['citation_id']}] ")
    # ...while the history it is drawn from kept growing.
    history_chars = sum(len(json.dumps(o["content"])) for o in result.observations)
    assert history_chars > 5 * MAX_CHARS

    # After the run: the stored working memory is still within the caps.
    rows = WorkingMemoryItem.objects.filter(run_id=run_id)
    assert rows.count() <= MAX_ITEMS
    assert sum(len(c) for c in rows.values_list("content", flat=True)) <= MAX_CHARS

    # Drop and rebuild: the same items.
    before = as_rows(view_of(run_id))
    assert working_memory_rebuild(run_id=run_id) == len(before)
    assert as_rows(view_of(run_id)) == before
    assert stored_items(run_id) == before
