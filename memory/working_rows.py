"""A run's working-memory rows as the run store reads and writes them: memory owns the rows,
the run store (``runs.orm.store``, ``runs.orm.writers``) composes these statements into a step's one
read and one commit (issue 25 item 4: other apps never import memory's models).

Plain statements of ``agentconsole.kernel.sqlbatch``, never run here: the reads join the run
row's round trip and the writes the commit's own transaction, so a step's working memory
commits with the run's compare-and-set or not at all. Nothing here imports ``runs``
(``memory.services`` does, and the run store imports this module).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentconsole.kernel import sqlbatch
from memory.domain.working import WorkingItem
from memory.models import WorkingMemoryItem

ITEM_COLUMNS = (
    "item_id", "kind", "content", "trust", "source_ids", "created_at_step",
    "expires_after_step", "seq",
)  # fmt: skip


def working_read(run_id: str) -> sqlbatch.Read:
    return sqlbatch.select(
        WorkingMemoryItem, ITEM_COLUMNS, {"run": run_id}, order_by=("created_at_step", "seq")
    )


def working_from_rows(rows: list[tuple[Any, ...]]) -> list[WorkingItem]:
    items = []
    for row in rows:
        values = dict(zip(ITEM_COLUMNS, row, strict=True))
        items.append(WorkingItem(**{**values, "source_ids": tuple(values["source_ids"])}))
    return items


def working_writes(
    run_id: str, kept: Sequence[WorkingItem], current: Sequence[WorkingItem]
) -> list[sqlbatch.Write]:
    """The writes that make the run's stored items ``kept`` (they were ``current``): always one
    DELETE (of whatever is not kept), so a step costs the same number of statements whether or
    not the caps evicted something, and one INSERT of the new ones, if any."""
    current_ids = {i.item_id for i in current}
    writes = [
        sqlbatch.delete(
            WorkingMemoryItem, {"run": run_id}, keep=("item_id", [i.item_id for i in kept])
        )
    ]
    new = [WorkingMemoryItem.from_item(run_id, i) for i in kept if i.item_id not in current_ids]
    if new:
        writes.append(sqlbatch.insert(new))
    return writes
