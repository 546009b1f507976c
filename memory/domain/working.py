"""Working memory (seed §2.2): the bounded, discardable context view of one run.

Not authoritative: it is derived from observations, so it can be dropped and rebuilt from them
(``rebuild``) with the same result. The planner's context is this view, never the whole history,
so the planner's input stays bounded however long the run is.

Eviction rule (``admit``), applied after every new item:
1. items whose ``expires_after_step`` is before the current step are dropped;
2. then the oldest items (by ``created_at_step``, then by ``seq``) are dropped until at most
   ``max_items`` remain and their content totals at most ``max_chars``.
The user's request never expires; it is evicted only by the caps, like anything else.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

MAX_ITEMS = 12
MAX_CHARS = 6_000
ITEM_CHARS = 1_000
# How many steps an item stays in view, by what it is.
TTL_STEPS = {"user-request": None, "tool-result": 8, "policy-rejection": 3, "human-decision": 3}


@dataclass(frozen=True)
class WorkingItem:
    item_id: str
    kind: str  # observation | evidence-summary | scratch-value
    content: str
    trust: str
    source_ids: tuple[str, ...]
    created_at_step: int
    expires_after_step: int | None
    seq: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "item_id": self.item_id,
            "kind": self.kind,
            "content": self.content,
            "trust": self.trust,
            "source_ids": list(self.source_ids),
            "created_at_step": self.created_at_step,
            "expires_after_step": self.expires_after_step,
        }


@dataclass(frozen=True)
class Caps:
    max_items: int = MAX_ITEMS
    max_chars: int = MAX_CHARS


def _clip(text: str, limit: int = ITEM_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def item_from_observation(
    *, observation_id: str, kind: str, trust: str, step: int, content: dict[str, Any], seq: int
) -> WorkingItem:
    """One observation → one item. Search results become an evidence summary (citation ids and
    clipped passages); everything else a clipped, key-sorted JSON rendering."""
    ttl = TTL_STEPS.get(kind, 3)
    value = content.get("value") if isinstance(content, dict) else None
    if isinstance(value, dict) and isinstance(value.get("results"), list):
        lines = [
            f"[{r.get('citation_id')}] {str(r.get('passage', ''))[:300]}"
            for r in value["results"]
            if isinstance(r, dict)
        ]
        return WorkingItem(
            item_id=f"wm-{observation_id}",
            kind="evidence-summary",
            content=_clip("\n".join(lines) or "(no results)"),
            trust=trust,
            source_ids=(observation_id,),
            created_at_step=step,
            expires_after_step=None if ttl is None else step + ttl,
            seq=seq,
        )
    text = json.dumps(content, sort_keys=True, ensure_ascii=False)
    return WorkingItem(
        item_id=f"wm-{observation_id}",
        kind="observation",
        content=_clip(text),
        trust=trust,
        source_ids=(observation_id,),
        created_at_step=step,
        expires_after_step=None if ttl is None else step + ttl,
        seq=seq,
    )


def admit(
    items: Iterable[WorkingItem], new: Iterable[WorkingItem], *, step: int, caps: Caps = Caps()
) -> list[WorkingItem]:
    """The view after adding ``new`` at ``step`` (pure; see the module docstring)."""
    merged = {i.item_id: i for i in items}
    for item in new:
        merged[item.item_id] = item
    alive = [
        i for i in merged.values() if i.expires_after_step is None or i.expires_after_step >= step
    ]
    alive.sort(key=lambda i: (i.created_at_step, i.seq))
    total = sum(len(i.content) for i in alive)
    while alive and (len(alive) > caps.max_items or total > caps.max_chars):
        total -= len(alive.pop(0).content)
    return alive


def rebuild(
    observations: Iterable[dict[str, Any]], *, step: int, caps: Caps = Caps()
) -> list[WorkingItem]:
    """Replay the observations in order: the same view the steps built incrementally."""
    items: list[WorkingItem] = []
    for seq, o in enumerate(observations, start=1):
        item = item_from_observation(
            observation_id=o["observation_id"],
            kind=o["kind"],
            trust=o["trust"],
            step=o["step"],
            content=o["content"],
            seq=seq,
        )
        items = admit(items, [item], step=o["step"], caps=caps)
    return admit(items, [], step=step, caps=caps)


def untrusted_sources(view: Iterable[WorkingItem]) -> tuple[str, ...]:
    """The observation ids behind the untrusted items of a view (sorted, once each)."""
    return tuple(sorted({s for i in view if i.trust == "untrusted-content" for s in i.source_ids}))
