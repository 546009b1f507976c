"""No door serves the demo logins in production (issue 21 item 12): with DEBUG=0, every entry
point refuses to start while an active account still has its public demo password, not only
scripts/run.sh. Each entry point is started for real, as a supervisor would, on a SQLite
deployment of its own (migrated, ``admin`` with password ``admin``):

- the web process: scripts/web.sh (daphne), and uvicorn loading the same ASGI application;
- the WSGI application under a WSGI server (the standard library's);
- the worker (scripts/worker.sh, Celery prefork) and beat (scripts/beat.sh);
- the gateway (scripts/gateway.sh, the model calls runs wait on).

With the demo password each exits non-zero and says why; with the password changed each starts
(the web port answers, the worker says ready, beat sends its first sweep). A database the check
cannot read is a refusal too; with DEBUG on, the demo logins work as before.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.procs import group, kill_all

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# A bound on one process starting (Django set-up, a password hash check per demo account) on a
# machine other tests share; not a speed claim.
START_S = 180
REFUSED = "refuses to start with DEBUG=0"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 0.2).close()
    except OSError:
        return False
    return True


@dataclass
class Site:
    """A deployment of its own: a SQLite file, the embedded broker in a folder, DEBUG=0."""

    folder: Path
    env: dict[str, str]

    def manage(self, *args: str) -> None:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]

    def set_passwords(self, *changes: tuple[str, str]) -> None:
        """Each (name, password) in turn, saved each time (as ``changepassword`` does), in one
        process: a Django start-up costs seconds of CPU on a shared machine."""
        self.manage(
            "shell",
            "-c",
            "from django.contrib.auth import get_user_model\n"
            f"for name, password in {list(changes)!r}:\n"
            "    u, _ = get_user_model().objects.get_or_create(username=name)\n"
            "    u.set_password(password)\n"
            "    u.save()",
        )


def make_site(folder: Path, *, database: Path | None = None) -> Site:
    """A site on a copy of ``database`` (a migrated SQLite file), or on an empty file."""
    inherited = ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "DEBUG", "PORT")
    env = {k: v for k, v in os.environ.items() if k not in inherited}
    env.update(
        DEBUG="0",
        SECRET_KEY="entry-" + os.urandom(32).hex(),
        ALLOWED_HOSTS="127.0.0.1",
        SECURE_SSL_REDIRECT="0",
        DATABASE_URL=f"sqlite:///{folder / 'db.sqlite3'}",
        AGENTCONSOLE_BROKER_DIR=str(folder / "broker"),
        AGENTCONSOLE_BIN=str(BIN),
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
        BEAT_SCHEDULE=str(folder / "celerybeat-schedule"),
        SWEEP_INTERVAL_S="1",  # beat's first sweep comes within a second of its start
        WORKER_CONCURRENCY="1",
    )
    if database is not None:
        shutil.copyfile(database, folder / "db.sqlite3")
    return Site(folder, env)


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated database with an account that is no demo one, copied for each site (a
    migration run is the slowest part of a site)."""
    site = make_site(tmp_path_factory.mktemp("migrated"))
    site.manage("migrate", "--noinput", "-v0")
    site.set_passwords(("dana", "a-password-of-her-own"))
    return site.folder / "db.sqlite3"


@pytest.fixture(scope="module")
def demo_site(tmp_path_factory: pytest.TempPathFactory, migrated: Path) -> Site:
    site = make_site(tmp_path_factory.mktemp("demo-site"), database=migrated)
    site.set_passwords(("admin", "admin"))
    return site


@pytest.fixture(scope="module")
def changed_site(tmp_path_factory: pytest.TempPathFactory, migrated: Path) -> Site:
    site = make_site(tmp_path_factory.mktemp("changed-site"), database=migrated)
    site.set_passwords(("admin", "admin"), ("admin", "no-longer-the-demo-one"))
    return site


# name -> (argv, "started" as seen from outside: the port answers, or the log says so)
Started = Callable[[int, str], bool]
WSGI_SERVER = (
    "import sys; from wsgiref.simple_server import make_server; "
    "from agentconsole.wsgi import application; "
    "make_server('127.0.0.1', int(sys.argv[1]), application).serve_forever()"
)
ENTRY_POINTS: dict[str, tuple[Callable[[int], list[str]], Started]] = {
    "web.sh (daphne)": (lambda port: ["scripts/web.sh"], lambda port, log: _port_open(port)),
    "uvicorn": (
        lambda port: [str(BIN / "uvicorn"), "--port", str(port), "agentconsole.asgi:application"],
        lambda port, log: _port_open(port),
    ),
    "wsgi": (
        lambda port: [sys.executable, "-c", WSGI_SERVER, str(port)],
        lambda port, log: _port_open(port),
    ),
    "worker.sh": (lambda port: ["scripts/worker.sh"], lambda port, log: " ready." in log),
    "beat.sh": (lambda port: ["scripts/beat.sh"], lambda port, log: "Sending due task" in log),
    # The gateway (issue 22) is an entry point too: it says "serving" once it runs.
    "gateway.sh": (lambda port: ["scripts/gateway.sh"], lambda port, log: " serving: " in log),
}


@dataclass
class Outcome:
    started: bool
    returncode: int | None
    log: str


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[[Site, str], Outcome]]:
    """Start an entry point in its own process group and wait until it started or exited."""
    processes: list[subprocess.Popen[bytes]] = []

    def run(site: Site, name: str) -> Outcome:
        argv, started = ENTRY_POINTS[name]
        port = _free_port()
        log_path = tmp_path / f"{len(processes)}.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                argv(port),
                cwd=ROOT,
                env={**site.env, "PORT": str(port)},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        processes.append(process)
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            text = log_path.read_text(errors="replace")
            if process.poll() is not None:
                return Outcome(False, process.returncode, text)
            if started(port, text):
                return Outcome(True, None, text)
            time.sleep(0.2)  # waiting for a real process to start or exit
        raise AssertionError(f"{name} neither started nor exited:\n{text[-3000:]}")

    yield run
    for process in processes:
        kill_all(group(process.pid))
        process.wait(30)


@pytest.mark.parametrize("name", list(ENTRY_POINTS))
def test_with_a_demo_password_every_entry_point_refuses_to_start(
    demo_site: Site, start: Callable[[Site, str], Outcome], name: str
) -> None:
    outcome = start(demo_site, name)
    assert not outcome.started, outcome.log[-3000:]
    assert outcome.returncode != 0
    assert REFUSED in outcome.log
    assert "active accounts with their public demo password: admin." in outcome.log
    assert "manage.py changepassword NAME" in outcome.log


@pytest.mark.parametrize("name", list(ENTRY_POINTS))
def test_with_the_password_changed_every_entry_point_starts(
    changed_site: Site, start: Callable[[Site, str], Outcome], name: str
) -> None:
    outcome = start(changed_site, name)
    assert outcome.started, outcome.log[-3000:]
    assert REFUSED not in outcome.log


def test_a_database_the_check_cannot_read_is_a_refusal(
    tmp_path: Path, start: Callable[[Site, str], Outcome]
) -> None:
    """Not migrated: a process started unchecked would serve the demo logins once it is."""
    outcome = start(make_site(tmp_path), "web.sh (daphne)")
    assert not outcome.started
    assert outcome.returncode != 0
    assert REFUSED in outcome.log
    assert "is the database reachable and migrated (manage.py migrate)?" in outcome.log


def test_with_debug_on_the_demo_logins_still_start(
    demo_site: Site, start: Callable[[Site, str], Outcome]
) -> None:
    development = Site(demo_site.folder, {**demo_site.env, "DEBUG": "1"})
    outcome = start(development, "web.sh (daphne)")
    assert outcome.started, outcome.log[-3000:]
