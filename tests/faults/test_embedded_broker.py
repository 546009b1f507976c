"""The embedded deployment's broker must not lose a message or kill its consumer (SPEC §2:
"a real worker process, no Redis"; settings.py configures kombu's filesystem transport).

Every crash and cancel test on SQLite goes through this broker: the test process (like the web
process and the sweeper in production) writes a message file while the worker polls the folder.
Here the same race runs in isolation, through the Celery app exactly as settings.py configures
it for the embedded mode (a private ``AGENTCONSOLE_BROKER_DIR``, no ``REDIS_URL``), in two fresh
processes: one producer putting messages (with a second, busy thread, as a web server or the
test process with its log readers has), one consumer taking them as the worker does
(``drain_events`` → the transport's ``_get``). Every message must arrive once, intact; a
consumer error is what makes a real worker exit (its consumer loop does not survive it).

Found by the crash tests: on SQLite a worker died now and then with ``JSONDecodeError`` in
``kombu/transport/filesystem.py`` ``_get``: the producer creates the message file, then locks
and writes it; the consumer renames and reads it without looking at the lock, so it can read an
empty file (kombu issue #1551).

The property is "never lost, never twice, never a consumer error", not "fast": each message is
fsynced, and under a loaded CI machine the consumer may not drain the folder before its
deadline. What it has not taken by then is read back from the queue folder: a message is lost
only if it is neither delivered nor still queued.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.workers import BASE_DIR

MESSAGES = 300
TIMEOUT_S = 150
QUEUE = "embedded-broker-race"

SETUP = """
import json, os, sys, time
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentconsole.settings")
import django
django.setup()
from agentconsole.celery import app
n = int(sys.argv[1])
"""

PRODUCER = (
    SETUP
    + """
import threading

def busy():  # another thread of the producing process (a web server has several)
    while True:
        sum(range(10_000))

threading.Thread(target=busy, daemon=True).start()
with app.connection_for_write() as conn:
    queue = conn.SimpleQueue(sys.argv[2])
    for i in range(n):
        queue.put({"i": i, "pad": "x" * 512})
    queue.close()
"""
)

CONSUMER = (
    SETUP
    + """
seen, errors = [], []
with app.connection_for_read() as conn:
    queue = conn.SimpleQueue(sys.argv[3])
    print("ready", flush=True)
    deadline = time.monotonic() + float(sys.argv[2])
    while len(seen) + len(errors) < n and time.monotonic() < deadline:
        try:
            message = queue.get(block=True, timeout=1)
        except queue.Empty:
            continue
        except Exception as exc:  # what kills a worker's consumer loop
            errors.append(f"{type(exc).__name__}: {exc}")
            continue
        seen.append(message.payload["i"])
        message.ack()
    queue.close()
print(json.dumps({"seen": seen, "errors": errors}))
"""
)


def embedded_env(broker_dir: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("REDIS_URL", "CELERY_BROKER_URL", "DATABASE_URL")
    }
    env.update(AGENTCONSOLE_BROKER_DIR=broker_dir, PYTHONPATH=str(BASE_DIR))
    return env


def test_embedded_broker_delivers_every_message_intact_while_a_consumer_polls(tmp_path) -> None:
    env = embedded_env(str(tmp_path / "broker"))
    consumer = subprocess.Popen(
        [sys.executable, "-c", CONSUMER, str(MESSAGES), str(TIMEOUT_S - 10), QUEUE],
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    producer = None
    try:
        assert consumer.stdout is not None
        assert consumer.stdout.readline().strip() == "ready", consumer.stderr
        producer = subprocess.run(
            [sys.executable, "-c", PRODUCER, str(MESSAGES), QUEUE],
            cwd=BASE_DIR,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
        assert producer.returncode == 0, producer.stderr[-2000:]
        out, err = consumer.communicate(timeout=TIMEOUT_S)
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait()
    assert consumer.returncode == 0, err[-2000:]
    report = json.loads(out.strip().splitlines()[-1])
    errors, seen = report["errors"], report["seen"]
    queued = still_queued(tmp_path / "broker" / "queue", QUEUE)
    print(f"\n{len(seen)} of {MESSAGES} delivered, {len(queued)} still queued at the deadline")
    assert errors == [], f"{len(errors)} consumer errors, first: {errors[:3]}"
    assert seen, "the consumer took nothing while the producer wrote"
    assert len(seen) == len(set(seen)), "a message was delivered twice"
    assert sorted(seen + queued) == list(range(MESSAGES)), "a message was lost"


def still_queued(folder: Path, queue: str) -> list[int]:
    """The ``i`` of every message of ``queue`` still waiting in the folder (kombu's message
    file: the JSON envelope, its body base64-encoded JSON)."""
    found = []
    for path in folder.glob(f"*.{queue}.msg"):
        envelope = json.loads(path.read_bytes())
        body = envelope["body"]
        if envelope["properties"].get("body_encoding") == "base64":
            body = base64.b64decode(body)
        found.append(json.loads(body)["i"])
    return found
