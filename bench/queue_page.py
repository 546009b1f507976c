"""``bench_console_queue_ms``: server time of the confirmation queue page with 1,000 waiting
items (issue 24 item 2, "Done when": at most 300 ms), measured, never asserted in tests.

1,000 pending confirmations on 1,000 runs (20 subjects, 4 profiles, a quarter derived from
untrusted content, tools of every side-effect class, every tenth proposal identical in 5 runs)
and 2,000 approved ones before them (the "same as approved before" lookups walk them), bulk
inserted. Then ``GET /confirmations/`` as an operator through django.test.Client, in-process:
the default page (oldest first, the first row's card in the detail pane), risk first, a
filtered page, and page 5.
"""

from __future__ import annotations

import copy
import time
import uuid
from datetime import timedelta
from typing import Any

from bench.support import stack as st
from bench.support.harness import Context, percentile

WAITING = 1_000
APPROVED = 2_000
TOOLS = [  # (name, version, side effect in the built-in registry)
    ("save_preference", "1"),
    ("publish_notice", "1"),
    ("write_artifact", "1"),
    ("search_public", "1"),
]


def _rows(tag: str, now: Any, profiles: list[Any]) -> tuple[list[Any], list[Any]]:
    from policy.domain.canonical import proposal_hash
    from policy.models import Confirmation
    from runs import models as m

    runs, confirmations = [], []
    for i in range(WAITING + APPROVED):
        waiting = i >= APPROVED
        run_id = f"bench-q-{tag}-{i:05d}"
        subject = f"bench-q-{tag}-s{i % 20:02d}"
        runs.append(
            m.Run(
                id=run_id, subject=subject, goal=f"benchmark queue item {i}",
                status="waiting_confirmation" if waiting else "completed",
                max_steps=8, max_tool_calls=8, max_repeated_proposal=2, deadline_ms=0,
                planner={"kind": "fixture", "outputs": []}, budgets={},
                profile=profiles[i % len(profiles)],
            )
        )  # fmt: skip
        name, version = TOOLS[i % len(TOOLS)]
        # 1 in 10 is one of five proposals, each identical in many runs (and approved before).
        value = f"en-g{i % 50}" if i % 10 == 0 else f"en-x{i}"
        arguments = {"key": "answer_language", "value": value}
        confirmations.append(
            Confirmation(
                id=f"{run_id}~c1", run_id=run_id,
                proposal_hash=proposal_hash(name, version, arguments),
                tool_name=name, tool_version=version,
                proposal={"kind": "tool", "tool_name": name, "tool_version": version,
                          "arguments": arguments, "source_observation_ids": []},
                status="pending" if waiting else "approved",
                expires_at_step=9, cites_untrusted=i % 4 == 0,
                decided_at=None if waiting else now - timedelta(minutes=i),
            )
        )  # fmt: skip
    return runs, confirmations


def _profile(name: str, by: Any) -> Any:
    """A run profile like the demo's read-only one, through the real service."""
    from runs.demo.demo_profiles import DEMO_PROFILES
    from runs.start import profiles

    return profiles.profile_create(data={**copy.deepcopy(DEMO_PROFILES[0]), "name": name}, by=by)


def bench_console_queue_ms(ctx: Context, *, reps: int = 30, warm: int = 3) -> dict[str, Any]:
    """Server time of /confirmations/ with 1,000 waiting items."""
    from django.db import connection, connections
    from django.test import Client
    from django.utils import timezone

    from policy.models import Confirmation
    from runs import models as m

    tag = uuid.uuid4().hex[:6]
    operator, _token = st._user(f"bench-queue-{tag}", "operator")
    made = time.monotonic()
    profiles = [_profile(f"bench-q-{tag}-{k}", operator) for k in range(4)]
    runs, confirmations = _rows(tag, timezone.now(), profiles)
    m.Run.objects.bulk_create(runs, batch_size=500)
    Confirmation.objects.bulk_create(confirmations, batch_size=500)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {Confirmation._meta.db_table}")
            cursor.execute(f"ANALYZE {m.Run._meta.db_table}")
    made_s = time.monotonic() - made
    client = Client()
    client.force_login(operator)
    pages = {
        "oldest_first": "/confirmations/",
        "risk_first": "/confirmations/?order=risk",
        "filtered": "/confirmations/?untrusted=1&side_effect=idempotent-write&q=item",
        "page_5": "/confirmations/?page=5",
    }
    out: dict[str, Any] = {}
    try:
        for name, path in pages.items():
            times, captured, response = st._time_get(client, path, warm, reps)
            out[name] = {
                "p95": round(percentile(times, 95), 2),
                **st._ms(times),
                "queries": len(captured),
                "bytes": len(response.content),
            }
    finally:
        Confirmation.objects.filter(run__id__startswith=f"bench-q-{tag}-").delete()
        m.Run.objects.filter(id__startswith=f"bench-q-{tag}-").delete()
        m.RunProfile.objects.filter(name__startswith=f"bench-q-{tag}-").delete()
        connections.close_all()
    how = (
        f"{WAITING} pending confirmations on as many runs (20 subjects, 4 profiles, 1 in 4 "
        f"untrusted, 4 tools of 4 side-effect classes, 1 in 10 identical in several runs) and "
        f"{APPROVED} approved before them, bulk-inserted ({made_s:.1f} s), {ctx.vendor}. "
        f"django.test.Client in-process, an operator's session: {warm} warm-ups then {reps} "
        f"timed GETs per page; the clock spans client.get() (middleware, session, the view, "
        f"the list of 100 rows, the first row's card with its identical proposals and the "
        f"last approved call, template rendering; no network)."
    )
    worst = max(v["p95"] for v in out.values())
    return {"console_queue_ms": {"p95_worst": worst, "target_max": 300, **out, "how": how}}
