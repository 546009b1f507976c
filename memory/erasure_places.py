"""Memory's places an erase rewrites (issue 21 item 3, issue 25 item 4): the columns of memory's
own models that can hold a copy of a subject's value, joined by the runs side of the erase into
``runs.privacy.erasure_places.ERASED``. The subject's preference records themselves are deleted by
``memory.services.preferences_erase``, not rewritten."""

from __future__ import annotations

from memory.models import PreferenceHistory, WorkingMemoryItem
from policy.erasure_places import Place

ERASED: tuple[Place, ...] = (
    # A revocation's reason, as the person typed it.
    Place(PreferenceHistory, ("reason",), run=None),
    Place(WorkingMemoryItem, ("content",)),
)
