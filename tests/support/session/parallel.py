"""Parallel test processes (pytest-xdist, ``make test``'s ``-n``): what each process must not share.

- **The test database**: pytest-django names it per process already (``test_<name>_gw0``, ``_gw1``);
  stacks that make their own (browser, soak, benchmarks) put the process id in the name
  (``bench.support.harness.private_database``). On PostgreSQL each is a copy of the run's one
  migrated template (``template_db.py``), whose name the processes inherit.
- **Redis**: the doorbell's channel layer, the broker, the cache, the heartbeats of
  ``/readyz`` and the shared metrics all live in ``REDIS_URL``'s database, and some tests count
  what is there (workers heartbeating, a histogram's samples). So each process gets a database
  of its own: this module rewrites ``REDIS_URL`` in each worker's environment before the worker
  starts, so Django's settings, the Celery app and every process a test starts read the same,
  private URL. The first process keeps ``REDIS_URL``'s database; the others count up from it,
  or down when counting up would pass the last database (Redis has 16, 0-15): CI's ``/15`` gives
  15 and 14, ``/6`` gives 6 and 7.
- **Ports**: every server a test starts binds port 0 (a free port), so nothing to do.
- **Fixtures set up once for several tests**: the browser tests share one console and one
  Chromium per process (package fixtures), the worker tests a Celery worker per module. So the
  scheduler (``Scheduling``, taken by xdist's default ``load`` distribution) hands each subfolder
  of the browser tests (pages/, journeys/, queue/) to a process as one unit, and the modules of
  ``BY_MODULE`` a module at a time; every other test goes alone, to whichever process is free.
  Largest units first, so a long module does not start last. The browser tests are three units,
  not one: as one they kept a process busy for ~290 s, longer than the rest of the suite took on
  the other; each process that takes a unit starts its own stack and Chromium (~10 s).
  (xdist's own ``--dist loadgroup`` stopped grouping with pytest 9: pytest-dev/pytest-xdist#1386.)
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

REDIS_DATABASES = 16  # Redis's default `databases`; CI and the dev setup keep it

# tests/<folder>/<subfolder>/: all its tests in one unit (fixtures of the folder's own for all of
# them); the folder's own modules, if any, one more.
ONE_UNIT = ("browser",)
# tests/<folder>/: a module at a time (module-scoped workers and stacks; the soak, so it is
# handed out early rather than last).
BY_MODULE = ("workers", "faults", "mcp", "memory", "production", "soak")


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


def unit_of(nodeid: str) -> str:
    """The unit of work a test is handed out in (see the module docstring)."""
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    if len(parts) > 2 and parts[0] == "tests":
        if parts[1] in ONE_UNIT:
            return "/".join(parts[:3] if len(parts) > 3 else parts[:2])
        if parts[1] in BY_MODULE:
            return path
    return nodeid


def make_scheduler(config: Any, log: Any) -> Any:
    """For xdist's ``pytest_xdist_make_scheduler``: ``Scheduling`` under the default ``load``
    distribution; another ``--dist`` keeps xdist's own."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling  # import here: only under xdist

    class Scheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return Scheduling(config, log)


def shares_module_fixture(item: Any) -> bool:
    """Does the test use a fixture of ours kept for its module, class or session (set up once
    for several tests)? Then ``unit_of`` must keep it with the others that use it (a test checks
    this). A plugin's fixtures (pytest-django's class-scoped one for every test, its session
    database) have no base id; ours in tests/conftest.py are cheap and per process anyway."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        defs[-1].scope in ("module", "class", "package", "session")
        and defs[-1].baseid not in ("", "tests")
        for defs in info.name2fixturedefs.values()
        if defs
    )
