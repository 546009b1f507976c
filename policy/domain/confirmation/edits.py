"""A person's edit of a waiting proposal's arguments (issue 24 item 1), as data: what changed
(a diff of JSON paths, old → new) and the arguments the tool would get.

The person edits what they were shown: the arguments with every secret masked
(``redaction.shown_arguments``). The edit is therefore a diff against the *shown* arguments,
applied to the *real* ones, so a leaf the person left alone keeps its real value (a masked API
key stays the key, never its tag), and a leaf they changed gets exactly what they typed. A
changed leaf that still holds a mask's tag is refused: the tool would get the tag, not the
secret the person could not see (``EDIT_KEEPS_MASK``).

Paths are tuples of keys and list indexes, so no key can pose as a nested path (``{"a.b": 1}``
is ``("a.b",)``, never ``("a", "b")``); ``path_text`` writes them as provenance does
(``to``, ``labels[1]``, ``item.iban``) for people and the trace. A list whose length changed is
replaced whole at its path. No Django here.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from policy.domain.errors import DomainError
from policy.domain.origins.provenance import EditedBy
from policy.domain.secrets.redaction import ERASED_TAG, SECRET_TAG

Path = tuple[str | int, ...]
MAX_CHANGES = 64  # more than this is no edit of a proposal but a new one: decline instead

CHANGED = "changed"
ADDED = "added"
REMOVED = "removed"


class EditInvalid(DomainError):
    code = "EDIT_ARGUMENTS_INVALID"
    http_status = 400


@dataclass(frozen=True)
class Change:
    path: Path
    op: str  # changed | added | removed
    old: Any = None  # as shown (masked); None for an added path
    new: Any = None  # as typed; None for a removed path

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": path_text(self.path), "op": self.op}
        if self.op != ADDED:
            out["from"] = self.old
        if self.op != REMOVED:
            out["to"] = self.new
        return out


def path_text(path: Path) -> str:
    """``("item", "labels", 1)`` → ``item.labels[1]`` (provenance's spelling)."""
    out = ""
    for segment in path:
        if isinstance(segment, int):
            out += f"[{segment}]"
        else:
            out += f".{segment}" if out else segment
    return out or "$"


def _same(a: Any, b: Any) -> bool:
    # JSON equality: True is not 1, 1 is 1.0 (the canonical form hashes them alike).
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b


def diff(old: Any, new: Any, path: Path = ()) -> list[Change]:
    """What changed from ``old`` to ``new``: objects key by key, lists of one length index by
    index, anything else (and a list whose length changed) as one value."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[Change] = []
        for key in old:
            if key not in new:
                out.append(Change((*path, key), REMOVED, old=old[key]))
            else:
                out += diff(old[key], new[key], (*path, key))
        out += [Change((*path, k), ADDED, new=v) for k, v in new.items() if k not in old]
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [
            c for i, (a, b) in enumerate(zip(old, new, strict=True)) for c in diff(a, b, (*path, i))
        ]
    if isinstance(old, dict | list) or isinstance(new, dict | list):
        return [] if old == new and type(old) is type(new) else [Change(path, CHANGED, old, new)]
    return [] if _same(old, new) else [Change(path, CHANGED, old, new)]


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def edited_arguments(*, real: Any, shown: Any, typed: Any) -> tuple[dict[str, Any], list[Change]]:
    """The arguments the tool would get after the edit, and the changes (old values as shown).

    ``real``: the waiting proposal's arguments; ``shown``: the same, masked, as the person saw
    them; ``typed``: what the person sent (a JSON object).
    """
    if not isinstance(typed, dict):
        raise EditInvalid("The arguments must be a JSON object, as the tool takes them.")
    if not isinstance(real, dict) or not isinstance(shown, dict):
        raise EditInvalid("This proposal's arguments are not a JSON object; it cannot be edited.")
    changes = diff(shown, typed)
    if not changes:
        raise EditInvalid(
            "Nothing was changed: approve the proposal as it is, or change an argument.",
            code="EDIT_UNCHANGED",
        )
    if len(changes) > MAX_CHANGES:
        raise EditInvalid(
            f"More than {MAX_CHANGES} values changed: decline it and say what you want instead.",
            code="EDIT_TOO_LARGE",
        )
    for change in changes:
        if change.op != REMOVED and any(
            tag in text for text in _strings(change.new) for tag in (SECRET_TAG, ERASED_TAG)
        ):
            raise EditInvalid(
                f"{path_text(change.path)} still holds a masked value: the tool would get the "
                "mask, not the hidden text. Leave that value exactly as it was, or type all of it.",
                code="EDIT_KEEPS_MASK",
                path=path_text(change.path),
            )
    return _apply(real, changes), changes


def _apply(real: dict[str, Any], changes: Sequence[Change]) -> dict[str, Any]:
    out: dict[str, Any] = _copy(real)
    for change in changes:
        *parents, last = change.path
        node: Any = out
        for segment in parents:
            node = _child(node, segment, change)
        if change.op == REMOVED:
            _child(node, last, change)
            del node[last]
        elif change.op == ADDED:
            if not isinstance(node, dict):
                raise _misaligned(change)
            node[last] = _copy(change.new)
        else:
            _child(node, last, change)
            node[last] = _copy(change.new)
    return out


def _child(node: Any, segment: str | int, change: Change) -> Any:
    # The shown arguments are the real ones with string values masked: same keys, same list
    # lengths. A path that is not in the real arguments means they differ (a masked key):
    # refuse rather than guess where the person's change belongs.
    if isinstance(node, dict) and isinstance(segment, str) and segment in node:
        return node[segment]
    if isinstance(node, list) and isinstance(segment, int) and 0 <= segment < len(node):
        return node[segment]
    raise _misaligned(change)


def _misaligned(change: Change) -> EditInvalid:
    return EditInvalid(
        f"{path_text(change.path)} cannot be edited here (it holds masked text).",
        code="EDIT_KEEPS_MASK",
        path=path_text(change.path),
    )


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def covers(edited: Sequence[Path], leaf: Path) -> bool:
    """Whether ``leaf`` lies at or below one of the ``edited`` paths (a value the person typed,
    a list they replaced whole)."""
    return any(leaf[: len(p)] == tuple(p) for p in edited)


# Where the run's state keeps who edited its waiting proposal and what they changed: beside the
# proposal in ``pending_proposal``, under a key no proposal has. No planner output can carry
# it: a planner's proposal is stored as parsed (``ActionProposal``, unknown fields refused),
# and only the edit writes this key. The runner reads it back when the proposal resumes, so
# the values the person typed count as theirs (provenance ``edited``) when the gate checks
# the edited call again.
EDIT_KEY = "edited"


def pending_with_edit(
    proposal: dict[str, Any], *, by: str, edited_from: str, changes: Sequence[Change]
) -> dict[str, Any]:
    return {
        **proposal,
        EDIT_KEY: {
            "by": by,
            "from": edited_from,
            "paths": [list(c.path) for c in changes],
        },
    }


def split_edit(pending: Any) -> tuple[Any, EditedBy | None]:
    """The waiting proposal as the planner's output format, and the edit it carries, if any."""
    if not isinstance(pending, dict) or EDIT_KEY not in pending:
        return pending, None
    raw = {k: v for k, v in pending.items() if k != EDIT_KEY}
    meta = pending[EDIT_KEY]
    paths = tuple(tuple(p) for p in meta.get("paths", ()) if isinstance(p, list))
    return raw, EditedBy(by=str(meta.get("by", "")), paths=paths)
