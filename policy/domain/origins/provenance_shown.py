"""Provenance as the person deciding a confirmation reads it (issue 23 item 4): for each leaf of
the arguments, where its value came from, in words, from what the runtime recorded when the
proposal was held (the ``proposal.provenance`` and ``policy.confirmation.checked`` trace events,
policy.domain.origins.provenance) — never recomputed, never from the planner's citations.

What the page and the API add to the record, and only for reading it:

- an observation's tool (``tool-3 (search_public)``) and, for untrusted content, an excerpt of it:
  the passage around the first place the leaf's value occurs in it (else its beginning), secrets
  masked before it is cut (``redact_secrets``), at most ``EXCERPT`` characters;
- a grant's capability;
- each untrusted-derived argument's rule: ``confirm`` when the gate named it as a reason to wait
  (``untrusted_arguments``), else ``carry`` (its rule let it carry untrusted content). A
  ``refuse`` argument never waits: the gate refused the call.

A record that is missing (a scenario's confirmation, a run from before issue 23) or malformed is
shown as such: ``recorded`` is False and nothing is guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from policy.domain.origins.provenance import (
    CITED,
    GOAL,
    GRANT,
    MAX_LEAVES,
    OVERFLOW_ID,
    PREFERENCE,
    TRUSTED_TOOL,
    UNTRUSTED,
    argument_leaves,
)
from policy.domain.origins.taint import leaves, normal
from policy.domain.secrets.redaction import redact_secrets

EXCERPT = 120  # characters of an untrusted observation shown beside a leaf
_BEFORE = 40  # of which before the value, when the value is found
_SCAN = 50_000  # characters of an observation searched for the value
_UNTRUSTED_TRUST = "untrusted-content"

WHY = {
    "UNTRUSTED_PROVENANCE": "an argument derives from untrusted content and its rule is confirm",
    "PROVENANCE_OVERFLOW": (
        "the run read more untrusted content than its index holds: every argument counts as "
        "untrusted (fail closed)"
    ),
    "PROVENANCE_UNKNOWN": "no provenance was computed: every argument counts as untrusted",
    "TOOL_POLICY_ALWAYS": "the tool policy asks a person for every call of this tool",
    "OUTSIDE_AUTO_CONSTRAINTS": "the arguments are outside the tool policy's automatic limits",
}
OWN_MODE = "the tool's contract asks a person for this call"
RULE_WORDS = {
    "confirm": "rule confirm: derived from untrusted content, so the call waits for a person",
    "carry": "rule carry: may carry untrusted content; not why the call waits",
}


@dataclass(frozen=True)
class OriginShown:
    kind: str  # goal, grant, preference, trusted-tool, untrusted, cited
    ref: str  # "goal", a grant id, a preference key, an observation id
    words: str
    untrusted: bool
    tool: str = ""  # the tool whose result the observation is
    excerpt: str = ""  # untrusted content around the value: masked, cut


@dataclass(frozen=True)
class LeafShown:
    path: str
    argument: str
    origins: tuple[OriginShown, ...]
    untrusted: bool  # the runtime found it derived from untrusted content
    rule: str  # "confirm", "carry", or "" (not untrusted-derived)
    words: str  # the origins in one line: "← the user's goal; ← tool-1 (…): untrusted"

    @property
    def rule_words(self) -> str:
        return RULE_WORDS.get(self.rule, "")


@dataclass(frozen=True)
class ProvenanceShown:
    recorded: bool
    leaves: tuple[LeafShown, ...] = ()
    more_leaves: int = 0  # leaves the record counts but does not list (MAX_LEAVES)
    overflow: bool = False
    why: str = ""  # the trace's code of why the call waits
    why_words: str = ""
    waits_for: tuple[str, ...] = ()  # the arguments under ``confirm`` that made it wait

    @property
    def untrusted(self) -> bool:
        return any(leaf.untrusted for leaf in self.leaves)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for leaf, shown in zip(out["leaves"], self.leaves, strict=True):
            leaf["rule_words"] = shown.rule_words
        return out


NOT_RECORDED = ProvenanceShown(recorded=False)


def observation_refs(details: Mapping[str, Any] | None) -> set[str]:
    """The observation ids a record names (to fetch their tools and excerpts with the rest)."""
    kinds = (UNTRUSTED, CITED, TRUSTED_TOOL)
    return {ref for _, origins, _ in _recorded(details) for kind, ref in origins if kind in kinds}


def grant_refs(details: Mapping[str, Any] | None) -> set[str]:
    return {ref for _, origins, _ in _recorded(details) for kind, ref in origins if kind == GRANT}


def shown(
    details: Mapping[str, Any] | None,
    checked: Mapping[str, Any] | None,
    *,
    arguments: Any,
    observations: Mapping[str, Mapping[str, Any]],
    grants: Mapping[str, str],
) -> ProvenanceShown:
    """The record in words. ``details``: the ``proposal.provenance`` event's; ``checked``: the
    ``policy.confirmation.checked`` event's that held the proposal; ``arguments``: as shown to
    the person (secrets masked); ``observations``: id → row (trust, kind, content) of the run's
    observations the record names; ``grants``: id → capability."""
    if not isinstance(details, Mapping) or not isinstance(details.get("leaves"), int):
        return NOT_RECORDED
    checked = checked if isinstance(checked, Mapping) else {}
    asked = tuple(_strings(checked.get("untrusted_arguments")))
    why = str(checked.get("why") or checked.get("code") or "")
    names = list(arguments) if isinstance(arguments, dict) else []
    values = {path: value for path, _, value in argument_leaves(arguments)}
    out = []
    for path, origins, untrusted in _recorded(details):
        value = values.get(path)
        shown_origins = tuple(
            _origin(kind, ref, value, observations, grants) for kind, ref in origins
        )
        argument = _argument(path, names)
        rule = ("confirm" if argument in asked else "carry") if untrusted else ""
        out.append(
            LeafShown(path, argument, shown_origins, bool(untrusted), rule, _line(shown_origins))
        )
    listed = len(out)
    return ProvenanceShown(
        recorded=True,
        leaves=tuple(out),
        more_leaves=max(0, details["leaves"] - listed),
        overflow=details.get("overflow") is True,
        why=why,
        why_words=_why_words(checked),
        waits_for=asked,
    )


def _why_words(checked: Mapping[str, Any]) -> str:
    why = checked.get("why")
    if isinstance(why, str) and why:
        return WHY.get(why, why)
    return OWN_MODE if checked else ""


def _recorded(
    details: Mapping[str, Any] | None,
) -> list[tuple[str, list[tuple[str, str]], list[str]]]:
    """(path, [(kind, ref)], untrusted ids) of each leaf the record lists, in its order."""
    if not isinstance(details, Mapping) or not isinstance(details.get("leaves"), int):
        return []
    out = []
    for i in range(min(details["leaves"], MAX_LEAVES)):
        path = details.get(f"leaf_{i}")
        if not isinstance(path, str):
            break
        origins = [
            (kind, ref)
            for kind, _, ref in (o.partition(":") for o in _strings(details.get(f"from_{i}")))
            if ref
        ]
        out.append((path, origins, _strings(details.get(f"untrusted_{i}"))))
    return out


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _argument(path: str, names: list[str]) -> str:
    """The top-level argument a leaf's path is in: the longest argument name it starts with
    (an argument's own name may hold a dot or a bracket)."""
    for name in sorted(names, key=len, reverse=True):
        if path == name or path.startswith((f"{name}.", f"{name}[")):
            return name
    return path.split(".", 1)[0].split("[", 1)[0]


def _line(origins: tuple[OriginShown, ...]) -> str:
    if not origins:
        return "no source found (the planner wrote it)"
    return "; ".join(f"← {o.words}" for o in origins)


def _origin(
    kind: str,
    ref: str,
    value: Any,
    observations: Mapping[str, Mapping[str, Any]],
    grants: Mapping[str, str],
) -> OriginShown:
    if kind == GOAL:
        return OriginShown(kind, ref, "the user's goal", untrusted=False)
    if kind == GRANT:
        capability = grants.get(ref)
        words = f"the run's grant {capability}" if capability else f"the run's grant {ref}"
        return OriginShown(kind, ref, f"{words} (an operator's constraint)", untrusted=False)
    if kind == PREFERENCE:
        return OriginShown(kind, ref, f"preference {ref} (saved by the user)", untrusted=False)
    row = observations.get(ref)
    tool = _tool(row)
    named = f"{ref} ({tool})" if tool else ref
    if kind == TRUSTED_TOOL:
        return OriginShown(kind, ref, f"trusted tool result {named}", False, tool)
    if ref == OVERFLOW_ID:
        return OriginShown(kind, ref, "content the run read but no longer indexes", True)
    words = f"{named}: untrusted" + (", cited by the planner" if kind == CITED else "")
    if row is None:
        words += " (not found in the run now)"
    return OriginShown(kind, ref, words, True, tool, _excerpt(row, value))


def _tool(row: Mapping[str, Any] | None) -> str:
    content = row.get("content") if row is not None else None
    tool = content.get("tool") if isinstance(content, dict) else None
    return tool[:64] if isinstance(tool, str) else ""


def _untrusted_part(row: Mapping[str, Any]) -> Any:
    """What of an observation is untrusted: a tool result's value, only its parts labelled
    untrusted when it has labels; any other observation whole."""
    content = row.get("content")
    if not isinstance(content, dict) or "value" not in content:
        return content
    value, parts = content["value"], content.get("part_trust")
    if isinstance(parts, dict) and isinstance(value, dict):
        return {k: v for k, v in value.items() if parts.get(k) == _UNTRUSTED_TRUST}
    return value


def _excerpt(row: Mapping[str, Any] | None, value: Any) -> str:
    """The passage of the observation around the value (else its beginning): its text leaves
    joined, secrets masked, then cut to ``EXCERPT`` characters."""
    if row is None:
        return ""
    text = " · ".join(n for n in (normal(t) for t in leaves(_untrusted_part(row), keys=False)) if n)
    text = str(redact_secrets(text[:_SCAN]))
    at = _find(text, value)
    start = max(0, at - _BEFORE) if at >= 0 else 0
    if start:
        # Begin at a word (the first space after the cut, if it comes before the value).
        space = text.find(" ", start, at)
        start = space + 1 if space >= 0 else start
    end = min(len(text), start + EXCERPT)
    if end < len(text):
        # End at a word, unless that would cut the excerpt to less than half.
        space = text.rfind(" ", start + EXCERPT // 2, end)
        end = space if space >= 0 else end
    cut = text[start:end] if end == len(text) else text[start:end].rstrip(" ·")
    return ("…" if start else "") + cut + ("…" if end < len(text) else "")


def _find(text: str, value: Any) -> int:
    """Where the value first occurs in the text, case aside (-1: not found as written, or no
    value worth looking for: too short, masked, not text or a number)."""
    plain = isinstance(value, str | int | float) and not isinstance(value, bool)
    needle = normal(str(value)).lower() if plain else ""
    if len(needle) < 3 or "[secret:" in needle:
        return -1
    lowered = text.lower()
    return lowered.find(needle) if len(lowered) == len(text) else -1
