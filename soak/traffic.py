"""The soak's traffic over HTTP: the API client (an operator token, requests spread over the
web processes), the runs it creates (fixture planners calling ``soak.tools``) and the approver
that approves every pending confirmation with the hash it was shown."""

from __future__ import annotations

import json
import random
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from soak.stack import SoakError

HTTP_TIMEOUT_S = 30
POLL_S = 0.5
CREATE_AT_ONCE = 8


# --- HTTP --------------------------------------------------------------------------------------


class Api:
    """The soak's HTTP client: an operator token, requests spread over the web processes."""

    def __init__(self, ports: list[int], token: str) -> None:
        self.ports = ports
        self.token = token
        self._next = 0
        self._lock = threading.Lock()
        self.requests: dict[int, int] = dict.fromkeys(ports, 0)

    def _port(self) -> int:
        with self._lock:
            port = self.ports[self._next % len(self.ports)]
            self._next += 1
            self.requests[port] += 1
        return port

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        url = f"http://127.0.0.1:{self._port()}{path}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            url,
            data=data,
            method=method,
            headers={"Authorization": f"Token {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:  # noqa: S310
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")


def run_body(i: int, kind: str, rng: random.Random, hold_ms: int) -> dict[str, Any]:
    """One run's definition (fixture planner): reads and, for ``approve`` and ``blind`` runs, a
    write to the external log between them; then a final answer citing the first read."""

    def hold() -> int:
        return rng.randint(hold_ms // 2, hold_ms * 3 // 2)

    def read(n: int) -> dict[str, Any]:
        entry = f"r{i}-read{n}"
        return {"tool_name": "soak_read", "arguments": {"entry": entry, "hold_ms": hold()}}

    def write(tool: str) -> dict[str, Any]:
        # The hold split around the effect: a kill may land before it, or after it while the
        # answer is still on its way (the effect happened, the ledger does not know yet).
        total = hold()
        before = rng.randint(0, total)
        arguments = {"entry": f"r{i}-{tool}", "before_ms": before, "after_ms": total - before}
        return {"tool_name": tool, "arguments": arguments}

    calls = {
        "approve": [read(1), write("soak_write"), read(2)],
        "blind": [read(1), write("soak_write_blind"), read(2)],
        "reads": [read(1), read(2), read(3)],
    }[kind]
    outputs: list[dict[str, Any]] = [
        {"kind": "tool", "proposal_id": f"p{n + 1}", "tool_version": "1",
         "reason_summary": "soak", "source_observation_ids": ["user-1"], **call}
        for n, call in enumerate(calls)
    ]  # fmt: skip
    outputs.append({"kind": "final", "answer": f"soak run {i} done",
                    "citation_observation_ids": ["tool-1"]})  # fmt: skip
    return {
        "goal": f"soak run {i} ({kind})",
        "budgets": {"max_steps": len(outputs) + 2, "max_tool_calls": len(calls) + 1,
                    "max_repeated_proposal": 2, "deadline_ms": 3_600_000},
        "grants": [{"capability": "soak:use", "resource_scope": "*", "expires_at_step": 50}],
        "planner": {"kind": "fixture", "outputs": outputs},
    }  # fmt: skip


KINDS = ("approve", "approve", "blind", "reads")


def planned_write(i: int, kind: str) -> str | None:
    """The ``entry`` of run ``i``'s write (``run_body``), None for a run that only reads."""
    tool = {"approve": "soak_write", "blind": "soak_write_blind"}.get(kind)
    return f"r{i}-{tool}" if tool else None


def create_runs(api: Api, count: int, rng: random.Random, hold_ms: int) -> dict[str, str | None]:
    """Create ``count`` runs through the API, a few at a time; {run_id: its planned write}."""
    bodies = [(i, run_body(i, KINDS[i % len(KINDS)], rng, hold_ms)) for i in range(count)]

    def create(item: tuple[int, dict[str, Any]]) -> tuple[str, str | None]:
        i, body = item
        status, data = api.call("POST", "/api/runs/", body)
        if status != 201:
            raise SoakError(f"POST /api/runs/ answered {status}: {data}")
        return data["run_id"], planned_write(i, KINDS[i % len(KINDS)])

    with ThreadPoolExecutor(max_workers=CREATE_AT_ONCE) as pool:
        return dict(pool.map(create, bodies))


@dataclass
class Approver:
    """Approves every pending confirmation through HTTP until stopped (a thread)."""

    api: Api
    approved: int = 0
    refused: dict[int, int] = field(default_factory=dict)  # status → count (a race: 409)
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def loop(self) -> None:
        while not self.stop.is_set():
            try:
                self.once()
            except (OSError, ValueError) as exc:  # a web process busy or restarting: retry
                self.errors.append(f"{type(exc).__name__}: {exc}"[:200])
            self.stop.wait(POLL_S)

    def server_errors(self) -> list[str]:
        """Every 5xx the approver got: the web must answer 4xx or 2xx, never fail."""
        listed = [e for e in self.errors if e.endswith((": 500", ": 502", ": 503", ": 504"))]
        refused = [f"POST approve: {s} ({n}x)" for s, n in self.refused.items() if s >= 500]
        return listed + refused

    def once(self) -> int:
        status, pending = self.api.call("GET", "/api/confirmations/?status=pending")
        if status != 200:
            self.errors.append(f"GET /api/confirmations/: {status}")
            return 0
        done = 0
        for c in pending:
            path = f"/api/confirmations/{c['confirmation_id']}/approve/"
            body = {"proposal_hash": c["proposal_hash"], "reason": "soak: approved"}
            status, _ = self.api.call("POST", path, body)
            if status == 200:
                self.approved += 1
                done += 1
            else:
                self.refused[status] = self.refused.get(status, 0) + 1
        return done
