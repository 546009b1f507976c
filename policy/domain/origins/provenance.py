"""Value-level provenance (issue 23 item 1): where each argument of a proposal came from,
computed by the runtime from what the run read, never taken from the planner's word.

For each leaf of the arguments (its JSON path: ``to``, ``labels[1]``, ``item.iban``) the
origins are found by matching its value (policy.domain.origins.taint) against:

- ``goal``: the user's goal (the run's request); ``grant``: a value an operator put in a
  grant's constraints; ``preference``: the value of one of the user's stored preferences (memory)
  the planner is given for the step. These are first-party: a value they hold is one a person
  chose (a preference is only ever stored by its owner's confirmation of that exact value), so
  it is not *derived from untrusted content* even when retrieved text repeats it;
- ``trusted-tool``: a trusted tool result the run read (informational: it never clears taint,
  so a value first read in untrusted content stays untrusted when a trusted tool echoes it);
- ``untrusted``: an untrusted observation the run read, at any step since it started (the
  run's sticky index, not the planner's working-memory view);
- ``cited``: an untrusted observation the planner cited, whose content holds the leaf even
  below the matcher's usual length (citations may only add origins, never remove one).

- ``edited``: a person changed this value when they edited the waiting proposal (issue 24
  item 1): they typed it, so it is first-party whatever else holds it (ref: their name).

A leaf with none of these came from the planner itself. A leaf is **untrusted-derived** when it
has an untrusted (or cited) origin and no first-party origin vouches for it; a long leaf is
untrusted-derived when a passage it shares with untrusted content is not also in the goal.
When the run's index overflowed (``overflow``) every leaf is untrusted-derived.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from policy.domain.origins.taint import (
    LONG,
    SEP,
    ContentIndex,
    RunIndex,
    compact,
    fold,
    leaves,
    normal,
)

GOAL = "goal"
GRANT = "grant"
PREFERENCE = "preference"
# The origins a person vouches for (module docstring).
FIRST_PARTY = frozenset({GOAL, GRANT, PREFERENCE})
TRUSTED_TOOL = "trusted-tool"
UNTRUSTED = "untrusted"
CITED = "cited"
EDITED = "edited"
# The observation id an overflowed index stands for: something the run read, not kept.
OVERFLOW_ID = "index-overflow"
MAX_LEAVES = 64


@dataclass(frozen=True)
class Origin:
    kind: str
    ref: str  # an observation id, a grant id, a preference's key, or "goal"


@dataclass(frozen=True)
class LeafProvenance:
    path: str
    argument: str
    origins: tuple[Origin, ...]
    # The untrusted observations this leaf derives from once first-party origins are taken
    # into account (empty: not untrusted-derived).
    untrusted: tuple[str, ...]


@dataclass(frozen=True)
class ArgumentProvenance:
    leaves: tuple[LeafProvenance, ...]
    overflow: bool = False

    def tainted(self) -> dict[str, tuple[str, ...]]:
        """Top-level argument → the untrusted observations some leaf of it derives from."""
        out: dict[str, set[str]] = {}
        for leaf in self.leaves:
            if leaf.untrusted:
                out.setdefault(leaf.argument, set()).update(leaf.untrusted)
        return {k: tuple(sorted(v)) for k, v in sorted(out.items())}

    def summary(self) -> dict[str, Any]:
        """The trace's ``proposal.provenance`` details: paths, origin kinds and ids, never a
        value. ``leaf_<i>`` is ``path``; ``from_<i>`` its origins as ``kind:ref``."""
        details: dict[str, Any] = {
            "leaves": len(self.leaves),
            "untrusted_arguments": list(self.tainted())[:32],
            "overflow": self.overflow,
        }
        for i, leaf in enumerate(self.leaves[:MAX_LEAVES]):
            details[f"leaf_{i}"] = leaf.path[:128]
            details[f"from_{i}"] = [f"{o.kind}:{o.ref}"[:128] for o in leaf.origins][:16]
            if leaf.untrusted:
                details[f"untrusted_{i}"] = list(leaf.untrusted)[:16]
        return details


@dataclass(frozen=True)
class EditedBy:
    """The values a person typed into a waiting proposal: their name and the paths they changed
    (tuples of keys and list indexes, as ``policy.domain.confirmation.edits`` records them)."""

    by: str
    paths: tuple[tuple[str | int, ...], ...]


@dataclass(frozen=True)
class FirstParty:
    """What the run's people said: the goal, each grant's constraint values, and the values of
    the user's preferences (each under its key, matched as the goal is)."""

    index: ContentIndex
    grants: Mapping[str, frozenset[str]]  # grant id → compact values of its constraints
    preferences: ContentIndex = field(default_factory=ContentIndex)

    def holds(self, packed: str) -> bool:
        return self.index.holds(packed) or self.preferences.holds(packed)


def first_party(
    goal: str,
    grant_constraints: Iterable[tuple[str, Any]],
    preferences: Mapping[str, Any] | None = None,
) -> FirstParty:
    """``preferences``: key → value of the user's preferences the planner is given (their
    values only: a key names a setting, it is nothing the user said)."""
    index = ContentIndex()
    index.add(GOAL, normal(goal))
    values = {
        gid: frozenset(compact(fold(normal(v))) for v in leaves(c, keys=False))
        for gid, c in grant_constraints
        if c
    }
    saved = ContentIndex()
    for key, value in sorted((preferences or {}).items()):
        parts = [n for n in (normal(leaf) for leaf in leaves(value, keys=False)) if n]
        if parts:
            saved.add(str(key), SEP + SEP.join(parts) + SEP)
    return FirstParty(index, values, saved)


def _paths(
    value: Any, path: str, argument: str, segments: tuple[str | int, ...]
) -> Iterator[tuple[str, str, Any, tuple[str | int, ...]]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, f"{path}.{k}", argument, (*segments, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, f"{path}[{i}]", argument, (*segments, i))
    else:
        yield path, argument, value, segments


def _leaves(arguments: Any) -> Iterator[tuple[str, str, Any, tuple[str | int, ...]]]:
    if not isinstance(arguments, dict):
        yield from _paths(arguments, "$", "$", ())
        return
    for name, value in arguments.items():
        if isinstance(value, dict | list) and not value:
            yield name, name, value, (name,)
        else:
            yield from _paths(value, name, name, (name,))


def argument_leaves(arguments: Any) -> Iterator[tuple[str, str, Any]]:
    """(path, top-level argument, scalar) of each leaf; an empty object or list is a leaf.
    Arguments that are no object (the schema layer refuses them) are one leaf, path ``$``."""
    for path, argument, value, _ in _leaves(arguments):
        yield path, argument, value


def compute(
    arguments: Any,
    *,
    index: RunIndex,
    people: FirstParty,
    cited_untrusted: Collection[str] = (),
    overflow: bool = False,
    edited: EditedBy | None = None,
) -> ArgumentProvenance:
    """The provenance of each leaf of ``arguments`` (module docstring). ``edited``: the paths a
    person changed in the waiting proposal; the leaves at or below them are first-party."""
    out = []
    for path, argument, value, segments in _leaves(arguments):
        leaf = _leaf(path, argument, value, index, people, cited_untrusted, overflow)
        if edited is not None and _typed(edited, segments):
            # The person typed this value: vouched for whole, as the goal vouches for what it
            # says, even if retrieved text also holds it. (An overflowed index still makes
            # every argument count as untrusted-derived: tool_policy reads ``overflow``.)
            leaf = LeafProvenance(path, argument, (Origin(EDITED, edited.by), *leaf.origins), ())
        out.append(leaf)
    return ArgumentProvenance(tuple(out), overflow=overflow)


def _typed(edited: EditedBy, segments: tuple[str | int, ...]) -> bool:
    return any(segments[: len(p)] == p for p in edited.paths)


def _leaf(
    path: str,
    argument: str,
    value: Any,
    index: RunIndex,
    people: FirstParty,
    cited: Collection[str],
    overflow: bool,
) -> LeafProvenance:
    if isinstance(value, bool) or value is None or isinstance(value, dict | list):
        text = ""
    else:
        text = str(value)
    spaced = fold(normal(text))
    packed = compact(spaced)
    origins: list[Origin] = []
    vouched = bool(packed) and people.index.origins(spaced, packed)
    if vouched:
        origins.append(Origin(GOAL, GOAL))
    origins += [Origin(GRANT, g) for g, vs in sorted(people.grants.items()) if packed in vs]
    if packed:
        origins += [
            Origin(PREFERENCE, k) for k in sorted(people.preferences.origins(spaced, packed))
        ]
    origins += [Origin(TRUSTED_TOOL, o) for o in sorted(index.trusted.origins(spaced, packed))]
    found = index.untrusted.origins(spaced, packed)
    origins += [Origin(UNTRUSTED, o) for o in sorted(found)]
    added = {o for o in cited if o not in found and index.untrusted.contains(o, spaced, packed)}
    origins += [Origin(CITED, o) for o in sorted(added)]
    untrusted = found | added
    if untrusted and any(o.kind in FIRST_PARTY for o in origins):
        untrusted = _not_vouched(untrusted, index.untrusted, people, spaced, packed)
    if overflow:
        untrusted = {*untrusted, OVERFLOW_ID}
    return LeafProvenance(path, argument, tuple(origins), tuple(sorted(untrusted)))


def _not_vouched(
    found: set[str], untrusted: ContentIndex, people: FirstParty, spaced: str, packed: str
) -> set[str]:
    """What remains untrusted of a leaf a first-party text also holds: nothing for a short
    leaf (the person said that value); for a long one, the passages it shares with untrusted
    content that the first-party text does not hold (the goal quoted in a body vouches for
    the quote, not for the paragraph an attacker added after it)."""
    if len(packed) < LONG:
        return set()
    if all(people.holds(s) for s in untrusted.shared(spaced, packed)):
        return set()
    return found
