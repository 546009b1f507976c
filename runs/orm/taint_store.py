"""The provenance index of a run, as the ORM adapter keeps it (issue 23 item 2).

The index is the run's ``TaintEntry`` rows, written in the commits of the observations they
index (runs.orm.writers). A step asks it through ``OrmLookups.taint_index``: each process keeps the
built index of the runs it worked on lately (``_KEPT``), and a step reads only the entries
added since, from the entry it holds last on (one indexed query: the unique (run, seq) index):

- the first row of the answer must be the entry it holds last (same sequence, observation and
  length), or the copy is of another run that had the same id (a test database flushed and
  reused): then the whole index is read again;
- entries are only ever added, in the run's commits, whose compare-and-set orders them: an
  entry not yet visible belongs to a commit after the state the step decides on, and that
  step's own commit then fails its compare-and-set.

So the cost of a step is the entries added since that process last saw the run (usually none
or one), not the run's length; a cold process reads the index once, bounded by
``taint.MAX_INDEX_CHARS``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from agentconsole.kernel import sqlbatch
from policy.domain.origins.taint import Entry, RunIndex, entry_seq
from runs import models as m

KEPT_RUNS = 64
_KEPT: OrderedDict[str, RunIndex] = OrderedDict()
_LOCK = threading.Lock()
_COLUMNS = ("seq", "observation_id", "trust", "text")


# How many sequence numbers a kept copy may be behind and still be read by their list (a plain
# ``IN``, agentconsole.kernel.sqlbatch); further behind, the entries are read by range.
MAX_GAP = 64


def _read(run_id: str, since: int, upto: int | None) -> list[Entry]:
    if upto is not None and 0 <= upto - since < MAX_GAP:
        where = {"run": run_id, "seq": list(range(since, upto + 1))}
        (rows,) = sqlbatch.fetch([sqlbatch.select(m.TaintEntry, _COLUMNS, where)])
        return sorted((Entry(*row) for row in rows), key=lambda e: e.seq)
    found = m.TaintEntry.objects.filter(run_id=run_id, seq__gte=since).order_by("seq")
    return [Entry(*row) for row in found.values_list(*_COLUMNS)]


def run_index(run_id: str, observation_seq: int | None = None) -> RunIndex:
    """The run's index with every entry committed so far (module docstring). With the run's
    ``observation_seq`` the entries that may exist past the kept copy are known by number:
    one plain indexed read of those numbers."""
    upto = entry_seq(observation_seq, "trusted-tool") if observation_seq is not None else None
    with _LOCK:
        kept = _KEPT.get(run_id)
    if kept is not None and kept.last_key is not None:
        entries = _read(run_id, kept.last_seq, upto)
        first = entries[0] if entries else None
        if first is not None and (first.seq, first.observation_id, len(first.text)) == (
            kept.last_key
        ):
            with _LOCK:
                # ``extend`` skips what it holds: two threads extending one copy add once.
                kept.extend(entries[1:])
            _keep(run_id, kept)
            return kept
    index = RunIndex()
    index.extend(_read(run_id, 0, None))
    _keep(run_id, index)
    return index


def _keep(run_id: str, index: RunIndex) -> None:
    with _LOCK:
        _KEPT[run_id] = index
        _KEPT.move_to_end(run_id)
        while len(_KEPT) > KEPT_RUNS:
            _KEPT.popitem(last=False)


def forget(run_id: str) -> None:
    """Drop this process's copy (an erase rewrote the run's entries)."""
    with _LOCK:
        _KEPT.pop(run_id, None)
