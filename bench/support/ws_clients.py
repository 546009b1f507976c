"""The websocket clients of the trace benchmark, in a child process of their own (``python -m
bench.support.ws_clients``), so their receive clock is not delayed by the runner threads of the
benchmark process competing for the GIL."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.support.harness import ROOT
from bench.support.stack import (
    CONNECT_AT_ONCE,
    CONNECT_ATTEMPTS,
    _stop_group,
)


class _WsClients:
    """The websocket clients, in a child process: ``python -m bench.support.ws_clients``."""

    def __init__(self, specs: list[tuple[str, str]], env: dict[str, str]) -> None:
        fd, out = tempfile.mkstemp(prefix="bench-ws-", suffix=".json")
        os.close(fd)
        self.out = Path(out)
        fd, err = tempfile.mkstemp(prefix="bench-ws-", suffix=".log")
        self.err = Path(err)
        try:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "bench.support.ws_clients"],
                cwd=ROOT,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=fd,
                text=True,
                start_new_session=True,
            )
        finally:
            os.close(fd)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, name="bench-ws-stdout", daemon=True).start()
        self._send(json.dumps({"clients": specs, "out": str(self.out)}))

    def _read(self) -> None:
        for line in self.popen.stdout or ():
            self.lines.put(line.strip())

    def _send(self, line: str) -> None:
        if self.popen.stdin is None:
            raise RuntimeError("websocket clients: no stdin")
        self.popen.stdin.write(line + "\n")
        self.popen.stdin.flush()

    def expect(self, word: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.05, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is not None and line.startswith(word):
                return line
            if time.monotonic() > deadline or self.popen.poll() is not None:
                err = self.err.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"websocket clients: no {word!r} ({line!r}); stderr:\n{err}")

    def received(self) -> int:
        self._send("count")
        return int(self.expect("count", 30).split()[1])

    def finish(self, timeout: float = 30) -> list[list[Any]]:
        self._send("stop")
        self.expect("done", timeout)
        return json.loads(self.out.read_text())

    def stop(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            if self.popen.stdin is not None:
                self.popen.stdin.close()
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _stop_group(self.popen)
        self.out.unlink(missing_ok=True)
        self.err.unlink(missing_ok=True)


def _ws_clients_main() -> int:
    """Child process: connect every client, say ``ready``, record every frame with
    ``time.time()`` at receipt until told ``stop``, then write the records and say ``done``."""
    from websockets.asyncio.client import connect

    config = json.loads(sys.stdin.readline())
    specs = config["clients"]
    frames: list[tuple[int, str, float]] = []
    events = [0]  # event frames received so far, all clients

    async def main() -> None:
        loop = asyncio.get_running_loop()
        ready = [loop.create_future() for _ in specs]
        sockets: list[Any] = []

        # Connect CONNECT_AT_ONCE at a time, retrying: daphne drops a handshake the application
        # has not accepted within its websocket connect timeout (5 s), which 100 simultaneous
        # handshakes (each: token lookup, access check, replay) can exceed.
        gate = asyncio.Semaphore(CONNECT_AT_ONCE)
        attempts_failed: list[str] = []

        async def client(i: int, uri: str, token: str) -> None:
            for attempt in range(CONNECT_ATTEMPTS):
                opened = False
                try:
                    await gate.acquire()
                    async with connect(
                        uri,
                        additional_headers=[("Authorization", f"Token {token}")],
                        open_timeout=30,
                    ) as ws:
                        opened = True
                        gate.release()
                        sockets.append(ws)
                        async for data in ws:
                            t = time.time()
                            # The console sends text frames; a binary one is still JSON text.
                            raw = data if isinstance(data, str) else data.decode()
                            frames.append((i, raw, t))
                            if '"replayed"' not in raw:
                                events[0] += 1
                            elif not ready[i].done():
                                ready[i].set_result(True)
                    failure = f"closed before the replay ended (code {ws.close_code})"
                except Exception as exc:  # counted; retried while not yet connected
                    if not opened:
                        gate.release()
                    failure = f"{type(exc).__name__}: {exc}"
                if ready[i].done():
                    return
                attempts_failed.append(failure)
                if attempt == CONNECT_ATTEMPTS - 1:
                    ready[i].set_result(failure)
                await asyncio.sleep(0.5)

        tasks = [asyncio.create_task(client(i, u, t)) for i, (u, t) in enumerate(specs)]
        outcomes = await asyncio.wait_for(asyncio.gather(*ready), timeout=120)
        report = {
            "unconnected": [i for i, o in enumerate(outcomes) if o is not True],
            "failed_attempts": len(attempts_failed),
            "errors": sorted(set(attempts_failed))[:3],
        }
        print(f"ready {json.dumps(report)}", flush=True)
        while True:
            command = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
            if command in ("stop", ""):
                break
            print(f"count {events[0]}", flush=True)
        await asyncio.gather(*(ws.close() for ws in sockets), return_exceptions=True)
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
    records = []
    for i, raw, t in frames:
        msg = json.loads(raw)
        if msg.get("type") == "event":
            records.append([i, msg["sequence"], msg["event"], t])
    Path(config["out"]).write_text(json.dumps(records))
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(_ws_clients_main())
