"""A JSON-path diff of two argument values: what an operator reads to see how a waiting call
differs from the last one approved for the same tool and subject (issue 24 item 3).

Plain Python. Both sides are the arguments *as shown* (secrets already masked by
``policy.domain.secrets.redaction.shown_arguments``): the diff never sees a secret, so it can never
print one. Types stay visible ("7" and 7 differ), objects are compared key by key, arrays
index by index (an insertion shows as changes from there on: simple and predictable, and a
person reads the exact bytes beside it anyway).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

MAX_CHANGES = 50  # a diff longer than this says how many more there are
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Change:
    path: str  # "$.key", "$.items[2]", '$["a key"]'
    kind: str  # "added" | "removed" | "changed"
    before: str  # compact JSON of the earlier value ("" when added)
    after: str  # compact JSON of the value waiting now ("" when removed)


@dataclass(frozen=True)
class Diff:
    changes: tuple[Change, ...]
    more: int = 0  # changes not listed (over MAX_CHANGES)

    @property
    def same(self) -> bool:
        return not self.changes and not self.more


def _text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _key(path: str, key: str) -> str:
    return f"{path}.{key}" if _NAME.match(key) else f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def _same(a: Any, b: Any) -> bool:
    # bool is an int in Python and 1 == 1.0: JSON types compared as JSON text.
    return type(a) is type(b) and _text(a) == _text(b)


def _walk(before: Any, after: Any, path: str, out: list[Change]) -> None:
    if isinstance(before, dict) and isinstance(after, dict):
        for key in sorted(set(before) | set(after), key=str):
            here = _key(path, str(key))
            if key not in after:
                out.append(Change(here, "removed", _text(before[key]), ""))
            elif key not in before:
                out.append(Change(here, "added", "", _text(after[key])))
            else:
                _walk(before[key], after[key], here, out)
        return
    if isinstance(before, list) and isinstance(after, list):
        for i in range(max(len(before), len(after))):
            here = f"{path}[{i}]"
            if i >= len(after):
                out.append(Change(here, "removed", _text(before[i]), ""))
            elif i >= len(before):
                out.append(Change(here, "added", "", _text(after[i])))
            else:
                _walk(before[i], after[i], here, out)
        return
    if not _same(before, after):
        out.append(Change(path, "changed", _text(before), _text(after)))


def json_diff(before: Any, after: Any) -> Diff:
    """The changes that turn ``before`` into ``after``, by JSON path, at most MAX_CHANGES."""
    out: list[Change] = []
    _walk(before, after, "$", out)
    return Diff(tuple(out[:MAX_CHANGES]), max(0, len(out) - MAX_CHANGES))
