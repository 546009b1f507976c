"""The first hour of a production install (issue 24 item 7), with Django's test client and the
management commands as a deploy script calls them: ``grant_role`` (accounts and roles),
``load_documents`` and ``load_profiles`` (the first profile, docs/first-hour/), then what each
role sees: the admin's link to the Django admin and its English model names, the favicon.

Personas: ``root`` (made by ``createsuperuser``: an admin), ``ana`` (made an operator here),
``ulla`` (made a user here), nobody else.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from agentconsole.kernel.roles import roles_of
from runs import services
from runs.models import Document, RunProfile
from runs.start.profiles import profile_create, run_from_profile
from tests.support.personas import ensure_roles, make_user

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
FIRST_HOUR = ROOT / "docs" / "first-hour"
PASSWORD = "a-long-first-hour-password"


@pytest.fixture(autouse=True)
def no_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(services, "enqueue_advance", lambda run_id, **kw: None)
    # The role groups of policy/migrations/0002_roles.py, which an earlier transactional test's
    # flush may have emptied in this process (tests run in any order across processes).
    ensure_roles()


def manage(*args: str, stdin: str = "", monkeypatch: pytest.MonkeyPatch | None = None) -> str:
    if monkeypatch is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def refused(*args: str) -> str:
    with pytest.raises(CommandError) as caught:
        manage(*args)
    return str(caught.value)


def user(name: str) -> Any:
    """The account as stored now (a fresh instance: roles_of caches on the one it saw)."""
    return get_user_model().objects.get(username=name)


# --- grant_role -------------------------------------------------------------------------------


def test_grant_role_makes_the_account_gives_roles_and_says_so_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    said = manage(
        "grant_role", "ana", "operator", "--create", "--password-stdin",
        stdin=PASSWORD + "\n", monkeypatch=monkeypatch,
    )  # fmt: skip
    assert said.strip() == "ana: account created; granted: operator"
    ana = user("ana")
    assert ana.check_password(PASSWORD)
    assert roles_of(ana) == {"operator"}
    assert not ana.is_staff

    # Again, with one more role and another password: the role is added, the password kept.
    said = manage(
        "grant_role", "ana", "operator", "reviewer", "--create", "--password-stdin",
        stdin="another-long-password\n", monkeypatch=monkeypatch,
    )  # fmt: skip
    assert said.strip() == "ana: granted: reviewer; already had: operator"
    ana = user("ana")
    assert roles_of(ana) == {"operator", "reviewer"}
    assert ana.check_password(PASSWORD)

    assert manage("grant_role", "ana", "reviewer", "--revoke").strip() == "ana: revoked: reviewer"
    assert roles_of(user("ana")) == {"operator"}


def test_grant_role_admin_opens_the_django_admin_and_revoking_it_closes_it() -> None:
    make_user("ulla", "user")
    manage("grant_role", "ulla", "admin")
    ulla = user("ulla")
    assert (ulla.is_staff, ulla.is_superuser) == (True, True)
    assert "admin" in roles_of(ulla)
    manage("grant_role", "ulla", "admin", "--revoke")
    ulla = user("ulla")
    assert (ulla.is_staff, ulla.is_superuser) == (False, False)
    assert roles_of(ulla) == {"user"}


def test_an_account_created_without_a_password_cannot_sign_in_until_one_is_set() -> None:
    said = manage("grant_role", "ulla", "user", "--create")
    assert "manage.py changepassword ulla" in said
    assert not user("ulla").has_usable_password()


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("grant_role", "nobody", "user"), "USER_NOT_FOUND"),
        (("grant_role", "nobody", "boss", "--create"), "ROLE_UNKNOWN"),
        (("grant_role", "nobody", "user", "--password-stdin"), "OPTION_INVALID"),
        (("grant_role", "nobody", "user", "--revoke"), "USER_NOT_FOUND"),
    ],
)
def test_grant_role_refusals_name_their_code_and_write_nothing(args: Any, code: str) -> None:
    assert refused(*args).startswith(f"{code}: ")
    assert not get_user_model().objects.filter(username="nobody").exists()


@pytest.mark.parametrize(
    ("name", "password", "code"),
    [("alice", "alice", "PASSWORD_IS_DEMO"), ("ulla", "short", "PASSWORD_INVALID")],
)
def test_a_weak_or_demo_password_is_refused_and_no_account_made(
    monkeypatch: pytest.MonkeyPatch, settings: Any, name: str, password: str, code: str
) -> None:
    settings.DEBUG = False
    monkeypatch.setattr("sys.stdin", io.StringIO(password + "\n"))
    assert refused("grant_role", name, "user", "--create", "--password-stdin").startswith(code)
    assert not get_user_model().objects.filter(username=name).exists()


# --- load_documents and load_profiles: the first run's profile ------------------------------


def test_the_first_hour_files_load_and_loading_them_again_changes_nothing() -> None:
    root = make_user("root", "admin")
    manage("load_documents", str(FIRST_HOUR / "corpus"))
    assert Document.objects.filter(corpus="public", slug="first-run").exists()
    said = manage("load_profiles", str(FIRST_HOUR / "profile.json"), "--by", "root")
    assert said.strip() == "created profile first-run"
    profile = RunProfile.objects.get(name="first-run")
    assert (profile.created_by, profile.audience) == (root, "all")
    again = manage("load_profiles", str(FIRST_HOUR / "profile.json"), "--by", "root")
    assert again.strip() == "kept profile first-run (one of that name exists)"
    assert RunProfile.objects.get(name="first-run").version == profile.version


def test_load_profiles_refuses_a_user_author_and_a_bad_file_writing_nothing(
    tmp_path: Path,
) -> None:
    make_user("ulla", "user")
    make_user("ana", "operator")
    good = json.loads((FIRST_HOUR / "profile.json").read_text())
    assert refused("load_profiles", str(FIRST_HOUR / "profile.json"), "--by", "ulla").startswith(
        "PROFILE_AUTHOR_NOT_OPERATOR: "
    )
    # The second profile is refused by the domain: the first is not written either.
    bad = {**good, "name": "too-wide", "tools": ["no_such_tool"]}
    both = tmp_path / "both.json"
    both.write_text(json.dumps([good, bad]))
    assert refused("load_profiles", str(both), "--by", "ana").split(":")[0].startswith("PROFILE")
    assert not RunProfile.objects.exists()
    assert refused("load_profiles", str(tmp_path / "nope.json"), "--by", "ana").startswith(
        "PROFILE_FILE_NOT_FOUND: "
    )
    (tmp_path / "twice.json").write_text('{"name": "a", "name": "b"}')
    assert refused("load_profiles", str(tmp_path / "twice.json"), "--by", "ana").startswith(
        "DUPLICATE_JSON_KEY: "
    )
    assert refused("load_profiles", str(FIRST_HOUR / "profile.json"), "--by", "x").startswith(
        "USER_NOT_FOUND: "
    )


# --- what each role sees ----------------------------------------------------------------------


def signed_in(name: str, role: str) -> Client:
    client = Client()
    client.force_login(make_user(name, role))
    return client


def test_only_admins_see_the_django_admin_link_and_every_page_has_the_icon() -> None:
    root = get_user_model().objects.create_superuser("root", "root@example.com", PASSWORD)
    admin = Client()
    admin.force_login(root)
    page = admin.get("/runs/").content.decode()
    assert '<a href="/admin/">Admin</a>' in page
    assert 'rel="icon" href="/static/console/favicon.svg"' in page
    for name, role in (("ana", "operator"), ("rita", "reviewer"), ("ulla", "user")):
        page = signed_in(name, role).get("/runs/").content.decode()
        assert 'href="/admin/"' not in page, role
        assert 'rel="icon"' in page
    assert 'rel="icon"' in Client().get("/login/").content.decode()
    icon = Client().get("/favicon.ico")
    assert (icon.status_code, icon["Location"]) == (302, "/static/console/favicon.svg")


def test_the_django_admin_names_its_models_in_english() -> None:
    root = get_user_model().objects.create_superuser("root", "root@example.com", PASSWORD)
    admin = Client()
    admin.force_login(root)
    index = admin.get("/admin/").content.decode()
    for name in ("Ledger entries", "Preference history", "Run profiles", "Trace events"):
        assert f">{name}<" in index, name
    assert "entrys" not in index
    assert "historys" not in index


def test_a_grant_beyond_the_step_budget_says_it_lasts_the_whole_run() -> None:
    """issue 24 item 8: "up to 4 steps" beside a grant "until step 8" said nothing of why."""
    root = make_user("root", "admin")
    manage("load_profiles", str(FIRST_HOUR / "profile.json"), "--by", "root")
    wide = json.loads((FIRST_HOUR / "profile.json").read_text())
    wide["name"] = "wide-grant"
    wide["grant_templates"][0]["expires_at_step"] = 8
    short = {**wide, "name": "short-grant", "grant_templates": [
        {**wide["grant_templates"][0], "expires_at_step": 2}
    ]}  # fmt: skip
    profile_create(data=wide, by=root)
    profile_create(data=short, by=root)
    page = signed_in("ulla", "user").get("/runs/new/").content.decode()
    assert "for the whole run (valid to step 8, but the run stops by step 4)" in page
    assert "for the whole run (to step 4, its last)" in page
    assert "until step 2 of at most 4" in page
    assert "until step 8" not in page


def test_each_run_row_names_its_cells_for_the_phone_layout() -> None:
    """The runs table becomes cards at 390 px (static/console/console.css): each cell carries
    the label its card shows; the browser test sees the status on the phone."""
    make_user("root", "admin")
    manage("load_profiles", str(FIRST_HOUR / "profile.json"), "--by", "root")
    run_from_profile(user=make_user("ulla", "user"), ref="first-run", goal="a labelled row")
    page = signed_in("rita", "reviewer").get("/runs/").content.decode()
    for label in ("Goal", "Status", "Subject", "Steps", "Tool calls", "Created", "Run"):
        assert f'data-label="{label}"' in page, label
