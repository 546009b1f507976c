"""Parallel test processes (pytest-xdist, ``make test``'s ``-n``): what each process must not share.

- **The test database**: pytest-django names it per process already (``test_<name>_gw0``, ``_gw1``);
  stacks that make their own (browser, soak, benchmarks) put the process id in the name
  (``bench.harness.private_database``).
- **Redis**: the doorbell's channel layer, the broker, the cache, the heartbeats of
  ``/readyz`` and the shared metrics all live in ``REDIS_URL``'s database, and some tests count
  what is there (workers heartbeating, a histogram's samples). So each process gets a database
  of its own: this module rewrites ``REDIS_URL`` in each worker's environment before the worker
  starts, so Django's settings, the Celery app and every process a test starts read the same,
  private URL. The first process keeps ``REDIS_URL``'s database; the others count up from it,
  or down when counting up would pass the last database (Redis has 16, 0-15): CI's ``/15`` gives
  15 and 14, ``/6`` gives 6 and 7.
- **Ports**: every server a test starts binds port 0 (a free port), so nothing to do.
- **The browser stack** (``tests/browser/conftest.py``): one console and one Chromium per
  process; ``group_for`` keeps the browser tests on one process, so one stack serves them all.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

REDIS_DATABASES = 16  # Redis's default `databases`; CI and the dev setup keep it

# Tests under these folders share one group: xdist's `loadgroup` runs a group in one process.
ONE_PROCESS_FOLDERS = ("browser",)


def redis_url_for(url: str, index: int, count: int) -> str:
    """``url`` with the database of parallel process ``index`` of ``count`` (see the module
    docstring); ``url`` itself for index 0 or an empty ``url`` (no Redis: nothing shared)."""
    if not url or index == 0:
        return url
    parts = urlsplit(url)
    path = parts.path.strip("/")
    base = int(path) if path else 0
    if count > REDIS_DATABASES:
        raise ValueError(
            f"{count} test processes need {count} Redis databases; Redis has {REDIS_DATABASES}"
        )
    up = base + count - 1 < REDIS_DATABASES
    db = base + index if up else base - index
    if db < 0:  # only with count > REDIS_DATABASES, refused above
        raise ValueError(f"no Redis database left for test process {index} from {url}")
    return urlunsplit(parts._replace(path=f"/{db}"))


def give_each_worker_its_redis(specs: Iterable[Any]) -> None:
    """For xdist's ``pytest_xdist_setupnodes``: set ``REDIS_URL`` in each worker's environment
    (execnet applies ``spec.env`` before the worker imports anything, Django's settings
    included)."""
    specs = list(specs)
    url = os.environ.get("REDIS_URL", "")
    for index, spec in enumerate(specs):
        if url:
            spec.env["REDIS_URL"] = redis_url_for(url, index, len(specs))


def group_for(path: Path, tests_root: Path) -> str | None:
    """The xdist group of a test module: its folder's when the folder's tests share one process
    (the browser stack), else ``None`` (xdist spreads them one by one)."""
    try:
        folder = path.relative_to(tests_root).parts[0]
    except (ValueError, IndexError):
        return None
    return folder if folder in ONE_PROCESS_FOLDERS else None


def shares_module_fixture(item: Any) -> bool:
    """Does the test use a fixture of ours kept for its module or class (set up once for several
    tests)? Such tests are grouped per module, so the fixture is set up in one process only.
    A plugin's fixtures (pytest-django's class-scoped one for every test) have no base id."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        defs[-1].scope in ("module", "class", "package") and defs[-1].baseid
        for defs in info.name2fixturedefs.values()
        if defs
    )
