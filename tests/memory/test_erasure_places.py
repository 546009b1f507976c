"""Every text or JSON column of every model is either rewritten by the erase or named, with a
reason, as left alone (issue 21 item 3): a column added later and named in neither list fails
here, so a new copy of a user's value cannot be forgotten silently.

"Text or JSON" is what the database search of the erase tests reads (tests/support/db_scan.py):
the two agree on what a column that can hold a value is.
"""

from __future__ import annotations

from collections import Counter

import pytest
from django.apps import apps
from django.db import models

from memory import erasure_places as memory_places
from policy import erasure_places as policy_places
from runs.privacy.erasure_places import ERASED, NOT_REWRITTEN, column_name, erased_columns
from tests.support.db_scan import text_columns


def _every_text_column() -> set[str]:
    return {
        column_name(model, field.attname)
        for model in apps.get_models(include_auto_created=True)
        # A proxy model's columns are its concrete model's, named there.
        if not model._meta.proxy
        for field in text_columns(model)
    }


def test_every_text_column_is_rewritten_or_named_with_a_reason() -> None:
    every = _every_text_column()
    erased = set(erased_columns())
    forgotten = every - erased - set(NOT_REWRITTEN)
    assert forgotten == set(), "add each to ERASED, or to NOT_REWRITTEN with why"
    assert set(NOT_REWRITTEN) - every == set(), "named, but no such text column"
    assert erased - every == set(), "rewritten, but no such text column"
    assert erased & set(NOT_REWRITTEN) == set(), "both rewritten and left alone"
    assert [c for c, n in Counter(erased_columns()).items() if n > 1] == []
    assert [c for c, why in NOT_REWRITTEN.items() if len(why.strip()) < 10] == []


@pytest.mark.django_db
def test_every_place_finds_its_rows() -> None:
    """Each place's lookup to its run (or subject) is a real one: the query runs."""
    for place in ERASED:
        assert issubclass(place.model, models.Model)
        list(place.rows(subject="alice", run_ids=["r1"]).values("pk", *place.columns))


def test_each_app_declares_the_places_of_its_own_models() -> None:
    """issue 25 item 4: the owner of a model names its erased columns; runs joins the lists
    (and names its own), so no app reaches into another's models to say what an erase does."""
    declared = {"policy": policy_places.ERASED, "memory": memory_places.ERASED}
    for app, places in declared.items():
        assert places, app
        assert {p.model._meta.app_label for p in places} == {app}
        assert set(places) <= set(ERASED), f"{app}'s places are not all joined into ERASED"
    others = [p for p in ERASED if p not in policy_places.ERASED + memory_places.ERASED]
    assert {p.model._meta.app_label for p in others} == {"runs"}
