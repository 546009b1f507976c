"""Repeated-proposal detection (seed §8.1), with "new" meaning new *content*.

The seed's sample bumps an observation version on every rejection, so a planner that repeats a
rejected proposal is never stopped. Here the knowledge version moves only when an observation
with content never seen before in this run arrives: an identical tool result or an identical
rejection is not new.

State is a small dict stored on the run, bounded to ``MAX_TRACKED`` fingerprints so a step's cost
never grows with the run's length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_TRACKED = 32


@dataclass(frozen=True)
class LoopVerdict:
    count: int
    polls: int
    repeated: bool  # over max_repeated_proposal without new content
    poll_limit: bool  # a polled tool over its own maximum


def observe(
    guard: dict[str, Any],
    fingerprint: str,
    *,
    knowledge_version: int,
    max_repeated: int,
    max_polls: int | None,
) -> tuple[dict[str, Any], LoopVerdict]:
    """Count ``fingerprint`` and return the new guard state and the verdict (pure)."""
    entry = guard.get(fingerprint)
    count = entry["n"] + 1 if entry is not None and entry["k"] == knowledge_version else 1
    polls = (entry["p"] if entry is not None else 0) + 1
    # An explicit tick orders entries for eviction: a JSONB column does not keep key order.
    tick = max((e["t"] for e in guard.values()), default=0) + 1
    new_guard = dict(guard)
    new_guard[fingerprint] = {"n": count, "k": knowledge_version, "p": polls, "t": tick}
    while len(new_guard) > MAX_TRACKED:
        oldest = min(new_guard, key=lambda fp: new_guard[fp]["t"])
        del new_guard[oldest]
    if max_polls is not None:
        # A polled tool may see changing results; it is bounded by its own maximum instead.
        return new_guard, LoopVerdict(count, polls, count > max_repeated, polls > max_polls)
    return new_guard, LoopVerdict(count, polls, count > max_repeated, False)
