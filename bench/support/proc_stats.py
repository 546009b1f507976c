"""What the processes of a benchmark cost, read from /proc: the resident memory of process
groups (sampled for its peak) and the CPU seconds of process groups and of the database
servers (read before and after). Used by ``bench.runs_in_flight``."""

from __future__ import annotations

import contextlib
import os
import resource
import threading
from pathlib import Path

SAMPLE_S = 0.25  # how often the resident memory is sampled


def groups_memory(pgrps: set[int]) -> tuple[int, int]:
    """(resident, proportional) bytes of every process whose process group is one of
    ``pgrps``: RSS counts the pages prefork children share with their parent once per process,
    PSS splits each shared page between its sharers (``/proc/<pid>/smaps_rollup``)."""
    rss = pss = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            if int(stat[stat.rindex(")") + 2 :].split()[2]) not in pgrps:
                continue
            for line in Path(f"/proc/{entry}/smaps_rollup").read_text().splitlines():
                name, _, value = line.partition(":")
                if name in ("Rss", "Pss"):
                    kb = int(value.split()[0]) * 1024
                    rss, pss = (rss + kb, pss) if name == "Rss" else (rss, pss + kb)
    return rss, pss


def _stat(entry: str) -> tuple[str, list[str]]:
    """(command name, the fields after it) of ``/proc/<entry>/stat``."""
    stat = Path(f"/proc/{entry}/stat").read_text()
    return stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()


def cpu_seconds(pgrps: dict[str, set[int]]) -> dict[str, float]:
    """CPU seconds (user + system, with the children each process has reaped) of every process
    group in ``pgrps``, and of PostgreSQL's and Redis's servers (by command name): read at the
    start and the end of a size, their difference says which process the machine's time went
    to. A process that exits unreaped between the two reads is not counted."""
    tick = os.sysconf("SC_CLK_TCK")
    out = dict.fromkeys([*pgrps, "postgresql", "redis"], 0.0)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            comm, f = _stat(entry)
            seconds = sum(int(v) for v in f[11:15]) / tick  # utime stime cutime cstime
            names = [name for name, groups in pgrps.items() if int(f[2]) in groups]
            names += ["postgresql"] if comm == "postgres" else []
            names += ["redis"] if comm.startswith("redis-server") else []
            for name in names:
                out[name] += seconds
    return out


class Sampler(threading.Thread):
    """Peak of the summed resident (and proportional) memory of some process groups, sampled
    every SAMPLE_S."""

    def __init__(self, groups: dict[str, set[int]]) -> None:
        super().__init__(daemon=True)
        self.groups = groups
        self.peak: dict[str, int] = dict.fromkeys(groups, 0)
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            for name, pgrps in self.groups.items():
                rss, pss = groups_memory(pgrps)
                self.peak[name] = max(self.peak[name], rss)
                self.peak[f"{name}_pss"] = max(self.peak.get(f"{name}_pss", 0), pss)
            self._halt.wait(SAMPLE_S)

    def stop(self) -> dict[str, int]:
        self._halt.set()
        self.join(5)
        return self.peak


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    # "gateway" is also in "workers_gateway": the workers' own figure is the difference.
    delta = {name: round(after[name] - before[name], 1) for name in after}
    delta["workers"] = round(delta.pop("workers_gateway") - delta["gateway"], 1)
    return delta
