"""Per kill, the timeline of each run the killed worker held: why a recovery took as long as it
did (issue 22 item 7), written into the soak's results.

A thread polls the held runs' rows (``POLL_S``) from the kill until the run moves on and notes
the first time each lease transition was seen, with the broker's queues at that moment:

* ``lapse``: the dead worker's ``lease_expires_at`` (read right after the kill);
* ``lapsed``: the lease was lapsed before that, its owner kept (a worker's reaper on this host
  found the process dead: ``runs.engine.leases.release_dead_local``);
* ``released``: the lease became free (no owner);
* ``resent``: the sweeper reserved the run for a re-send (``queued:resent-…``), the reservation's
  hold, and where its message is: which queue and how many messages are ahead of it;
* ``picked``: a worker's lease on the run (``host:pid:nonce``), and which of the run's queued
  messages left the broker then (the queue it was taken from);
* ``moved``: the run's next committed trace event (the recovery time the soak reports);
* ``no_worker_listening_s``: how long, until then, no worker process listened at all (every one
  killed or restarting): a wait no recovery can shorten, for want of a process to run it;
* ``killed_again_s``: the worker that took the run over was killed too, this long after the
  first kill, before the run moved on (the recovery then counts a second one).

Times are seconds after the kill. Transitions shorter than the poll interval may be missed; the
ones that matter here last seconds.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from soak.kills import Kill

POLL_S = 0.1
# runs.engine.leases' names (imported there only once Django is set up): a hand-back's message, and
# the sweeper's reservation for a re-send.
HANDED_BACK = "queued:"
RESENT = f"{HANDED_BACK}resent-"


@dataclass
class Watched:
    run_id: str
    kill_at: float
    worker: str
    dead_owner: str | None
    lapse_at: float | None
    events: dict[str, Any] = field(default_factory=dict)
    done: bool = False
    no_worker_s: float = 0.0

    def note(self, name: str, **extra: Any) -> None:
        if name not in self.events:
            self.events[name] = {"t": round(time.time() - self.kill_at, 2), **extra}


@dataclass
class Timeline:
    redis_url: str
    queues: tuple[str, str]  # (runs, control)
    listening: Callable[[], int] = lambda: 1  # how many worker processes listen now
    watched: list[Watched] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    thread: threading.Thread | None = None

    def start(self, exits: contextlib.ExitStack) -> None:
        """Poll from a thread of its own until ``finish`` (or the soak's end)."""
        self.thread = threading.Thread(target=self.loop, name="timeline", daemon=True)
        self.thread.start()
        exits.callback(self.finish)

    def finish(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(10)

    def watch_kill(self, kill: Kill) -> None:
        for run_id in kill.held:
            self.watch(run_id, kill_at=kill.at, worker=kill.worker)

    def watch(self, run_id: str, *, kill_at: float, worker: str) -> None:
        """Called right after the kill: the dead worker's lease is still on the row."""
        from runs import models as m

        first = m.Run.objects.filter(pk=run_id).values("lease_owner", "lease_expires_at").first()
        row: dict[str, Any] = dict(first or {})
        expires = row.get("lease_expires_at")
        item = Watched(
            run_id=run_id,
            kill_at=kill_at,
            worker=worker,
            dead_owner=row.get("lease_owner"),
            lapse_at=round(expires.timestamp() - kill_at, 2) if expires else None,
        )
        item.note("killed", queued=self.depths(), messages=self.where(run_id))
        with self.lock:
            self.watched.append(item)

    def depths(self) -> dict[str, int]:
        client = self._redis()
        try:
            return {q: int(client.llen(q)) for q in self.queues}
        finally:
            client.close()

    def _redis(self) -> Any:
        import redis

        return redis.Redis.from_url(self.redis_url)

    def where(self, run_id: str) -> list[dict[str, Any]]:
        """The run's messages in the queues: queue, how many messages are ahead (kombu pushes on
        the left and pops on the right), the queue's length."""
        client = self._redis()
        found = []
        try:
            for q in self.queues:
                items = client.lrange(q, 0, -1)
                for i, raw in enumerate(items):
                    if run_id.encode() in raw:
                        found.append({"queue": q, "ahead": len(items) - 1 - i, "len": len(items)})
        finally:
            client.close()
        return found

    def loop(self) -> None:
        from django.db import connections

        try:
            while not self.stop.wait(POLL_S):
                self.poll()
        finally:
            connections.close_all()

    def poll(self) -> None:
        from runs import models as m

        with self.lock:
            open_ = [w for w in self.watched if not w.done]
        if not open_:
            return
        if self.listening() == 0:
            for w in open_:
                w.no_worker_s += POLL_S
        rows = {
            r["id"]: dict(r)
            for r in m.Run.objects.filter(pk__in=[w.run_id for w in open_]).values(
                "id", "lease_owner", "lease_expires_at", "status"
            )
        }
        for w in open_:
            row = rows.get(w.run_id)
            if row is not None:
                self._step(w, row)

    def _step(self, w: Watched, row: dict[str, Any]) -> None:
        owner = row["lease_owner"]
        expires = row["lease_expires_at"]
        if owner is None and "picked" not in w.events:
            w.note("released")
        elif owner == w.dead_owner and expires and w.lapse_at is not None:
            if expires.timestamp() - w.kill_at < w.lapse_at - 0.05:
                w.note("lapsed")
        elif owner and owner.startswith(RESENT) and "resent" not in w.events:
            hold = round(expires.timestamp() - time.time(), 1) if expires else None
            w.events.setdefault("_messages", self.where(w.run_id))
            w.note("resent", hold_s=hold, messages=w.events["_messages"])
        elif owner and not owner.startswith(HANDED_BACK) and owner != w.dead_owner:
            before = w.events.get("_messages") or []
            after = self.where(w.run_id)
            taken = [m for m in before if m["queue"] not in {a["queue"] for a in after}]
            w.note("picked", owner=owner, taken_from=[m["queue"] for m in taken])
            w.done = True
        if row["status"] not in ("created", "running", "cancelling"):
            w.note("settled", status=row["status"])
            w.done = True

    def report(self, moved: dict[str, float]) -> list[dict[str, Any]]:
        """One entry per watched run, with ``moved`` (seconds from the kill to its next trace
        event, from ``soak.kills.recoveries``)."""
        out = []
        for w in self.watched:
            events = {k: v for k, v in w.events.items() if not k.startswith("_")}
            took = moved.get(f"{w.run_id}@{w.kill_at}")
            # The worker that took the run over was killed too before the run moved on: this
            # recovery then includes a second one.
            again = [
                o.kill_at - w.kill_at
                for o in self.watched
                if o.run_id == w.run_id and took and 0 < o.kill_at - w.kill_at < took
            ]
            out.append(
                {
                    "run": w.run_id,
                    "worker": w.worker,
                    "kill_at": round(w.kill_at, 2),
                    "lease_lapse_s": w.lapse_at,
                    **events,
                    "moved_s": took,
                    "no_worker_listening_s": round(w.no_worker_s, 1),
                    "killed_again_s": round(min(again), 2) if again else None,
                }
            )
        return out
