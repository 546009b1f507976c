"""Search every table of the database for a string (issue 9 items 11 and 12).

Generic on purpose: every model Django knows (auto-created join tables included), every text and
JSON column, so a table added later is searched without anyone remembering to add it here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.apps import apps
from django.db import models


@dataclass(frozen=True)
class Hit:
    table: str
    column: str
    pk: Any
    value: str

    def __str__(self) -> str:
        return f"{self.table}.{self.column} pk={self.pk}: {self.value[:160]!r}"


def text_columns(model: type[models.Model]) -> list[models.Field]:
    return [
        f
        for f in model._meta.concrete_fields
        if isinstance(f, models.CharField | models.TextField | models.JSONField)
    ]


def as_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    # A JSON column: search its serialized form (unescaped, so a value inside a string is seen).
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def scan(needle: str) -> list[Hit]:
    """Every (table, column, row) whose text holds ``needle`` (case-sensitive)."""
    hits: list[Hit] = []
    for model in apps.get_models(include_auto_created=True):
        columns = text_columns(model)
        if not columns:
            continue
        names = [f.attname for f in columns]
        # The base manager: a custom default manager must not hide rows from the search.
        for row in model._base_manager.values_list("pk", *names).iterator():
            pk, values = row[0], row[1:]
            for name, value in zip(names, values, strict=True):
                text = as_text(value)
                if text is not None and needle in text:
                    hits.append(Hit(model._meta.db_table, name, pk, text))
    return hits


def tables_searched() -> set[str]:
    return {m._meta.db_table for m in apps.get_models(include_auto_created=True) if text_columns(m)}
