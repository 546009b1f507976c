"""A profile's grant templates as form rows (issue 24 item 6): one row per template
(capability, scope, expiry step, calls) with its constraints as sub-rows (argument, kind,
value), so an operator need not write JSON. The rows build the very list the JSON editor
takes, and the domain (``runs.domain.profiles.validate_profile``) checks it: the same refusals
with the same codes, placed beside the field they are about.

The rows decide nothing: text that is not a number stays text and the domain refuses it in
its own words (``"3x"`` as an expiry is ``PROFILE_INVALID``, as in JSON). Field names:
``g-<i>-capability``, ``g-<i>-resource_scope``, ``g-<i>-expires_at_step``, ``g-<i>-max_calls``,
``g-<i>-c-<j>-arg|kind|value``; indexes may have gaps (the page's script removes rows).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from policy.domain import strict_json
from policy.domain.errors import DomainError
from policy.domain.grants import CONSTRAINT_KINDS
from policy.domain.strict_json import JsonRefused
from runs.domain.profiles import MAX_TEMPLATES

MAX_CONSTRAINTS = 8
GRANT_FIELDS = ("capability", "resource_scope", "expires_at_step", "max_calls")
_GRANT_KEY = re.compile(r"^g-(\d{1,2})-(capability|resource_scope|expires_at_step|max_calls)$")
_CONSTRAINT_KEY = re.compile(r"^g-(\d{1,2})-c-(\d{1,2})-(arg|kind|value)$")
_INT = re.compile(r"^-?\d{1,9}$")
# Kinds whose value is a list: a JSON array, or else plain items separated by commas.
_LISTS = ("one_of", "subset_of", "url_host_in")
# Kinds whose value is taken as typed (a string).
_TEXT = ("prefix", "pattern")
# A refusal's path, as ``validate_profile`` words a shape error ("grant_templates.0.max_calls").
_PATH = re.compile(r"^grant_templates[.\[](\d+)\]?\.?([a-z_]*)")
FORM_INVALID = "FORM_INVALID"


@dataclass
class ConstraintRow:
    arg: str = ""
    kind: str = "equals"
    value: str = ""


class FieldErrors(dict[str, tuple[str, str]]):
    """Field name -> (code, message). A field without one reads as ``()``: the page asks every
    field of every row, and a key the template does not find costs Django a failed lookup (an
    exception, then ``dir()`` of the dict) each time."""

    def __missing__(self, key: str) -> tuple[()]:
        return ()


@dataclass
class GrantRow:
    capability: str = ""
    resource_scope: str = ""
    expires_at_step: str = ""
    max_calls: str = ""
    constraints: list[ConstraintRow] = field(default_factory=list)
    # field name -> (code, message): shown beside that field.
    errors: FieldErrors = field(default_factory=FieldErrors)

    def empty(self) -> bool:
        return not any(getattr(self, f).strip() for f in GRANT_FIELDS) and not self.constraints


def rows_from_post(data: Mapping[str, Any]) -> list[GrantRow]:
    """The rows as typed, in index order; a row left wholly empty (the blank one the page
    always offers) is not a row. Keys past the limits are ignored; more rows than a profile
    may have are kept (the domain refuses them with its code)."""
    grants: dict[int, GrantRow] = {}
    constraints: dict[tuple[int, int], ConstraintRow] = {}
    for key in data:
        found = _GRANT_KEY.match(key)
        if found:
            i = int(found.group(1))
            setattr(grants.setdefault(i, GrantRow()), found.group(2), str(data.get(key, "")))
            continue
        found = _CONSTRAINT_KEY.match(key)
        if found and int(found.group(2)) < MAX_CONSTRAINTS:
            i, j = int(found.group(1)), int(found.group(2))
            grants.setdefault(i, GrantRow())
            setattr(constraints.setdefault((i, j), ConstraintRow()), found.group(3), str(data[key]))
    for (i, _j), row in sorted(constraints.items()):
        if row.arg.strip() or row.value.strip():
            grants[i].constraints.append(row)
    return [row for _i, row in sorted(grants.items()) if not row.empty()]


def rows_from_templates(templates: Any) -> list[GrantRow]:
    """A stored profile's templates as rows (the edit page)."""
    rows = []
    for t in templates if isinstance(templates, list) else []:
        if not isinstance(t, dict):
            continue
        cons = [_constraint_row(arg, c) for arg, c in (t.get("constraints") or {}).items()]
        rows.append(
            GrantRow(
                capability=str(t.get("capability", "")),
                resource_scope=str(t.get("resource_scope", "")),
                expires_at_step=str(t.get("expires_at_step", "")),
                max_calls="" if t.get("max_calls") is None else str(t["max_calls"]),
                constraints=cons,
            )
        )
    return rows


def _constraint_row(arg: str, constraint: Any) -> ConstraintRow:
    kind, value = next(iter(constraint.items())) if isinstance(constraint, dict) else ("", "")
    if kind in _TEXT and isinstance(value, str):
        text = value
    elif kind in _LISTS and isinstance(value, list) and all(_plain(v) for v in value):
        text = ", ".join(value)
    else:
        text = json.dumps(value, ensure_ascii=False)
    return ConstraintRow(arg=str(arg), kind=str(kind), value=text)


def _plain(value: Any) -> bool:
    """A list item that reads back the same from comma-separated text."""
    return isinstance(value, str) and value == value.strip() and "," not in value and value != ""


def _number(text: str) -> Any:
    text = text.strip()
    return int(text) if _INT.match(text) else text


def _value(kind: str, text: str) -> Any:
    """A constraint's value from its text: as typed for ``prefix`` and ``pattern``; else JSON
    when it is JSON, and otherwise the text itself (a string ``equals``; for ``maximum`` or
    ``absent_or`` the domain refuses it); a list kind also takes "a, b, c"."""
    if kind in _TEXT:
        return text
    try:
        parsed = strict_json.loads(text)
    except JsonRefused:
        parsed = text
    if kind in _LISTS and not isinstance(parsed, list):
        return [part.strip() for part in text.split(",") if part.strip()]
    return parsed


def templates_from_rows(rows: list[GrantRow]) -> list[dict[str, Any]]:
    """The list the JSON editor would hold. A constraint without an argument name, or an
    argument named twice in one row, is the form's own refusal (the JSON cannot say either)."""
    out = []
    for row in rows:
        t: dict[str, Any] = {
            "capability": row.capability.strip(),
            "resource_scope": row.resource_scope.strip(),
        }
        if row.expires_at_step.strip():
            t["expires_at_step"] = _number(row.expires_at_step)
        if row.max_calls.strip():
            t["max_calls"] = _number(row.max_calls)
        cons: dict[str, Any] = {}
        for c in row.constraints:
            arg = c.arg.strip()
            if not arg or arg in cons:
                why = "name the argument it checks" if not arg else f"{arg!r} is named twice"
                raise RowInvalid(f"A constraint must {why}." if not arg else f"{why}.", row)
            kind = c.kind if c.kind in CONSTRAINT_KINDS else c.kind[:32]
            cons[arg] = {kind: _value(kind, c.value)}
        if cons:
            t["constraints"] = cons
        out.append(t)
    return out


class RowInvalid(DomainError):
    """What the rows cannot express as JSON; shown beside the row's constraints."""

    code = FORM_INVALID

    def __init__(self, message: str, row: GrantRow) -> None:
        super().__init__(message)
        row.errors["constraints"] = (FORM_INVALID, message)


def place_error(rows: list[GrantRow], exc: DomainError) -> bool:
    """Put the domain's refusal beside the field it is about; False when it is about no row.

    1. A shape error names its path (``grant_templates.1.expires_at_step: …``).
    2. A secret names where it was found (``extra.field``: ``grant_templates[0].constraints…``).
    3. A scope or a capability the domain refused is named in ``extra``: the first row with it.
    """
    where = exc.extra.get("field") if isinstance(exc.extra.get("field"), str) else exc.message
    found = _PATH.match(str(where))
    if found and int(found.group(1)) < len(rows):
        name = found.group(2) if found.group(2) in GRANT_FIELDS else "constraints"
        rows[int(found.group(1))].errors[name] = (exc.code, exc.message)
        return True
    for name in ("resource_scope", "capability"):
        wanted = exc.extra.get("scope" if name == "resource_scope" else name)
        for row in rows:
            if wanted is not None and getattr(row, name).strip() == wanted:
                row.errors[name] = (exc.code, exc.message)
                return True
    return False


def blank_rows(rows: list[GrantRow]) -> list[GrantRow]:
    """The rows to show: each with a blank constraint line, then one blank row (without the
    page's script, that is how a row or a constraint is added: one per save)."""
    shown = [
        GrantRow(**{**row.__dict__, "constraints": [*row.constraints, ConstraintRow()]})
        for row in rows
    ]
    if len(shown) < MAX_TEMPLATES:
        shown.append(GrantRow(constraints=[ConstraintRow()]))
    return shown
