"""Bad input to ``manage.py run_fixture``: every refusal is a ``CommandError`` whose message starts
with a stable code, no traceback, and no run is created.

Codes: ``SCENARIO_NOT_JSON`` (not parseable as JSON), ``SCENARIO_INVALID`` (JSON, but not a
valid scenario, or larger than 1 MiB), ``SCENARIO_UNREADABLE`` (the file cannot be read).
"""

from __future__ import annotations

import copy
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.conf import settings as django_settings
from django.core.management import CommandError, call_command
from django.db import connection

from policy.models import Confirmation, Grant
from runs.models import Run
from tests.support.planner import tool_call

MANAGE_DIR = Path(django_settings.BASE_DIR)

VALID: dict[str, Any] = {
    "name": "bad-input-base",
    "description": "A valid scenario that each case below breaks in one place.",
    "subject": "alice",
    "goal": "What happens after retries are exhausted?",
    "budgets": {"max_steps": 4, "max_tool_calls": 2, "max_repeated_proposal": 2},
    "grants": [{"capability": "search:public", "resource_scope": "public", "expires_at_step": 4}],
    "planner": [
        tool_call("p1", "search_public", {"query": "retry quarantine queue"}, sources=None),
        {"kind": "final", "answer": "Quarantine.", "citation_observation_ids": ["tool-1"]},
    ],
}


def _with(**changes: Any) -> bytes:
    data = copy.deepcopy(VALID)
    for key, value in changes.items():
        if value is _DROP:
            data.pop(key)
        else:
            data[key] = value
    return json.dumps(data).encode("utf-8")


_DROP = object()


def _grant(**changes: Any) -> list[dict[str, Any]]:
    return [{**VALID["grants"][0], **changes}]


def _budgets(**changes: Any) -> dict[str, Any]:
    return {**VALID["budgets"], **changes}


def _confirmation(confirmation_id: str = "c1", **changes: Any) -> dict[str, Any]:
    return {
        "confirmation_id": confirmation_id,
        "proposal": {"tool_name": "search_public", "tool_version": "1", "arguments": {}},
        "approved": True,
        "expires_at_step": 4,
        **changes,
    }


def _too_big() -> bytes:
    output = VALID["planner"][0]
    planner = [dict(output, proposal_id=f"p{i}") for i in range(9_000)]
    text = _with(planner=planner)
    assert len(text) > 1024 * 1024
    return text


CASES: list[tuple[str, bytes, str]] = [
    ("not-json", b"{this is not json", "SCENARIO_NOT_JSON"),
    ("empty-file", b"", "SCENARIO_NOT_JSON"),
    ("truncated", _with()[:-10], "SCENARIO_NOT_JSON"),
    ("invalid-utf8", b'{"name": "\xff\xfe"}', "SCENARIO_NOT_JSON"),
    ("json-array", b"[]", "SCENARIO_INVALID"),
    ("json-array-of-scenario", b"[" + _with() + b"]", "SCENARIO_INVALID"),
    ("json-string", b'"scenario"', "SCENARIO_INVALID"),
    ("json-null", b"null", "SCENARIO_INVALID"),
    ("unknown-top-level-key", _with(grant_everything=True), "SCENARIO_INVALID"),
    ("unknown-key-in-grant", _with(grants=_grant(admin=True)), "SCENARIO_INVALID"),
    ("unknown-key-in-budgets", _with(budgets=_budgets(max_cost=1)), "SCENARIO_INVALID"),
    (
        "unknown-key-in-confirmation",
        _with(confirmations=[_confirmation(by="root")]),
        "SCENARIO_INVALID",
    ),
    (
        "unknown-human-action",
        _with(human=[{"action": "approve_everything"}]),
        "SCENARIO_INVALID",
    ),
    ("max-steps-six", _with(budgets=_budgets(max_steps="six")), "SCENARIO_INVALID"),
    ("max-steps-zero", _with(budgets=_budgets(max_steps=0)), "SCENARIO_INVALID"),
    ("max-steps-fraction", _with(budgets=_budgets(max_steps=6.5)), "SCENARIO_INVALID"),
    ("planner-not-a-list", _with(planner={"kind": "final"}), "SCENARIO_INVALID"),
    ("grants-not-a-list", _with(grants=VALID["grants"][0]), "SCENARIO_INVALID"),
    ("missing-subject", _with(subject=_DROP), "SCENARIO_INVALID"),
    ("empty-subject", _with(subject=""), "SCENARIO_INVALID"),
    ("subject-not-a-string", _with(subject=42), "SCENARIO_INVALID"),
    ("missing-goal", _with(goal=_DROP), "SCENARIO_INVALID"),
    ("missing-planner", _with(planner=_DROP), "SCENARIO_INVALID"),
    (
        "constraint-with-two-rules",
        _with(grants=_grant(constraints={"query": {"prefix": "a", "equals": "b"}})),
        "SCENARIO_INVALID",
    ),
    ("larger-than-1-mib", _too_big(), "SCENARIO_INVALID"),
]


def _expect_refusal(path: Path | str, code: str) -> CommandError:
    with pytest.raises(CommandError) as caught:
        call_command("run_fixture", str(path), "--json", stdout=io.StringIO())
    message = str(caught.value)
    assert message.startswith(f"{code}: "), message
    assert "Traceback" not in message
    assert Run.objects.count() == 0
    assert Grant.objects.count() == 0
    assert Confirmation.objects.count() == 0
    return caught.value


@pytest.mark.django_db
@pytest.mark.parametrize(("case", "text", "code"), CASES, ids=[c[0] for c in CASES])
def test_bad_scenario_is_refused_with_a_stable_code(tmp_path, case, text, code):
    path = tmp_path / f"{case}.json"
    path.write_bytes(text)
    _expect_refusal(path, code)


@pytest.mark.django_db
def test_unknown_key_is_named_in_the_message(tmp_path):
    path = tmp_path / "unknown.json"
    path.write_bytes(_with(grant_everything=True))
    error = _expect_refusal(path, "SCENARIO_INVALID")
    assert "grant_everything" in str(error)


@pytest.mark.django_db
def test_oversized_file_message_says_why(tmp_path):
    path = tmp_path / "big.json"
    path.write_bytes(_too_big())
    error = _expect_refusal(path, "SCENARIO_INVALID")
    assert "1 MiB" in str(error)


@pytest.mark.django_db
def test_missing_file_is_unreadable(tmp_path):
    _expect_refusal(tmp_path / "does-not-exist.json", "SCENARIO_UNREADABLE")


@pytest.mark.django_db
def test_directory_is_unreadable(tmp_path):
    _expect_refusal(tmp_path, "SCENARIO_UNREADABLE")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("case", "budgets"),
    [("boolean", {"max_steps": True}), ("numeric-string", {"max_steps": "6"})],
)
def test_json_types_are_not_coerced(tmp_path, case, budgets):
    """A boolean or a string where the scenario needs an integer is a wrong type, like "six".

    Coercing silently would turn ``"max_steps": true`` into a one-step budget nobody wrote.
    """
    path = tmp_path / f"{case}.json"
    path.write_bytes(_with(budgets=_budgets(**budgets)))
    _expect_refusal(path, "SCENARIO_INVALID")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_json_numbers_are_refused(tmp_path, constant):
    """NaN and Infinity are not JSON (RFC 8259); Python's json module accepts them by default.

    Inside planner outputs (passed through unvalidated on purpose) they must still never reach
    the database as a crash: the file is refused up front.
    """
    text = _with().decode("utf-8").replace('"retry quarantine queue"', constant)
    assert constant in text
    path = tmp_path / "nan.json"
    path.write_text(text, encoding="utf-8")
    _expect_refusal(path, "SCENARIO_NOT_JSON")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("case", "replacement"),
    [
        # issue 21 item 8: which query? The file is refused, not read as the last key says.
        ("duplicate-key", '"retry quarantine queue", "query": "something else"'),
        ("overflow", "1e999"),  # not NaN, but infinity all the same
        ("nul", '"retry\\u0000queue"'),  # PostgreSQL stores no NUL in text or jsonb
        ("lone-surrogate", '"\\ud800"'),  # no UTF-8 form
    ],
)
def test_json_with_no_one_meaning_or_no_storable_form_is_refused(tmp_path, case, replacement):
    """Inside planner outputs (passed through unvalidated on purpose) too: refused up front
    with SCENARIO_NOT_JSON, before any row is written."""
    text = _with().decode("utf-8").replace('"retry quarantine queue"', replacement)
    path = tmp_path / f"{case}.json"
    path.write_text(text, encoding="utf-8")
    _expect_refusal(path, "SCENARIO_NOT_JSON")


@pytest.mark.django_db(transaction=True)
def test_duplicate_confirmation_ids_are_refused(tmp_path):
    path = tmp_path / "duplicate-confirmations.json"
    path.write_bytes(_with(confirmations=[_confirmation("c1"), _confirmation("c1")]))
    _expect_refusal(path, "SCENARIO_INVALID")


# --- through a real process -------------------------------------------------------------------


def _database_url() -> str:
    """The URL of the database this test uses (the test database), for a child process."""
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{Path(s['NAME']).resolve()}"
    if connection.vendor == "postgresql":
        auth = quote(s["USER"] or "", safe="")
        if s.get("PASSWORD"):
            auth += ":" + quote(s["PASSWORD"], safe="")
        port = f":{s['PORT']}" if s.get("PORT") else ""
        return f"postgres://{auth}@{s['HOST'] or 'localhost'}{port}/{s['NAME']}"
    pytest.skip(f"no DATABASE_URL form for {connection.vendor}")


def _manage(*args: str, output_root: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "AGENTCONSOLE_RUN_OUTPUT_ROOT": str(output_root),
    }
    return subprocess.run(
        [sys.executable, "manage.py", "run_fixture", *args],
        cwd=MANAGE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("case", "text", "code"),
    [
        ("not-json", b"{this is not json", "SCENARIO_NOT_JSON"),
        ("unknown-key-in-grant", _with(grants=_grant(admin=True)), "SCENARIO_INVALID"),
    ],
)
def test_bad_scenario_in_a_real_process_prints_the_code_and_no_traceback(
    tmp_path, case, text, code
):
    path = tmp_path / "bad.json"
    path.write_bytes(text)

    done = _manage(str(path), "--json", output_root=tmp_path / "out")

    assert done.returncode != 0
    assert code in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "Traceback" not in done.stdout
    assert done.stdout.strip() == ""
    assert Run.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_missing_file_in_a_real_process(tmp_path):
    done = _manage(str(tmp_path / "missing.json"), output_root=tmp_path / "out")

    assert done.returncode != 0
    assert "SCENARIO_UNREADABLE" in done.stderr
    assert "Traceback" not in done.stderr
    assert Run.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_the_child_process_really_uses_the_test_database(corpus, tmp_path):
    """The same command, the seed walkthrough, in a child process on this test's database."""
    seed = MANAGE_DIR / "runs" / "fixtures" / "scenarios" / "seed-walkthrough.json"

    done = _manage(str(seed), "--json", output_root=tmp_path / "out")

    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    result = json.loads(done.stdout)
    assert result["state"]["status"] == "completed"
    assert result["state"]["stop_reason"] == "FINAL_ANSWER_VALIDATED"
    # The run the child created is visible here: same database.
    assert Run.objects.filter(pk=result["state"]["run_id"], status="completed").exists()
    assert Run.objects.count() == 1
