"""issue 9 item 7: demo accounts exist only on a development setup, never get their password reset,
and a production start refuses an account that still has its public demo password."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError, SystemCheckError

from agentconsole.checks import check_no_demo_passwords

pytestmark = pytest.mark.django_db


@pytest.fixture
def dev_var(settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """load_demo writes var/demo-logins.txt under BASE_DIR: keep the checkout's own file. The
    demo runs are not made (their tools run in threads that need a committed database; the
    accounts are what these tests are about; tests/workers/test_demo_data.py makes them)."""
    from runs.management.commands import load_demo

    monkeypatch.setattr(load_demo, "load_demo_runs", lambda **kw: [])
    settings.BASE_DIR = tmp_path
    settings.DEBUG = True
    return tmp_path


def _load(*args: str) -> None:
    call_command("load_demo", *args, stdout=_Sink())


class _Sink:
    def write(self, text: str) -> None:
        pass

    def flush(self) -> None:
        pass


def test_load_demo_twice_keeps_a_changed_password(dev_var: Path) -> None:
    """issue 9 item 7: load_demo used to set every demo password back to the user name."""
    _load()
    admin = get_user_model().objects.get(username="admin")
    assert admin.check_password("admin")
    admin.set_password("a-real-password-now")
    admin.save()
    _load()
    admin.refresh_from_db()
    assert admin.check_password("a-real-password-now")
    assert not admin.check_password("admin")
    logins = (dev_var / "var" / "demo-logins.txt").read_text()
    assert "admin/admin" not in logins  # not advertised: it does not work any more
    assert "alice/alice" in logins


def test_load_demo_refuses_with_debug_off(dev_var: Path, settings: Any) -> None:
    """issue 9 item 7: no demo accounts on a production setup, and no flag to force them."""
    settings.DEBUG = False
    with pytest.raises(CommandError, match="DEBUG"):
        _load()
    assert not get_user_model().objects.exists()


def test_auto_loads_only_a_fresh_development_database(dev_var: Path, settings: Any) -> None:
    """`make run` calls ``load_demo --auto``: a fresh machine gets the demo with one command; a
    database with users, or DEBUG off, gets nothing unless AGENTCONSOLE_DEMO=1 asks for it."""
    users = get_user_model().objects
    settings.DEBUG = False
    _load("--auto")  # no error: the start goes on, without a demo
    assert not users.exists()
    settings.DEBUG = True
    settings.AGENTCONSOLE_DEMO = "0"
    _load("--auto")
    assert not users.exists()
    settings.AGENTCONSOLE_DEMO = "auto"
    users.create_user("someone", password="their-own-password")
    _load("--auto")
    assert users.count() == 1
    settings.AGENTCONSOLE_DEMO = "1"
    _load("--auto")
    assert users.filter(username__in=["operator", "reviewer", "alice", "admin"]).count() == 4


def test_auto_loads_on_an_empty_database(dev_var: Path) -> None:
    _load("--auto")
    assert get_user_model().objects.filter(username="alice").exists()


def _check_ids(settings: Any) -> list[str]:  # settings: to read it after the override
    return [m.id for m in check_no_demo_passwords()]


def test_the_deploy_check_refuses_a_demo_password(settings: Any) -> None:
    """issue 9 item 7: with DEBUG off an active admin/admin is an error of `check --deploy`."""
    settings.DEBUG = False
    admin = get_user_model().objects.create_user("admin", password="admin")
    assert _check_ids(settings) == ["agentconsole.E001"]
    with pytest.raises(SystemCheckError, match=r"agentconsole\.E001"):
        call_command("check", "--deploy", "--fail-level", "ERROR", stdout=_Sink(), stderr=_Sink())
    # A development setup may keep its demo accounts.
    settings.DEBUG = True
    assert _check_ids(settings) == []
    # A changed password, or an inactive account, passes.
    settings.DEBUG = False
    admin.set_password("not-the-demo-one")
    admin.save()
    assert _check_ids(settings) == []
    get_user_model().objects.create_user("alice", password="alice", is_active=False)
    assert _check_ids(settings) == []
    get_user_model().objects.create_user("reviewer", password="reviewer")
    assert _check_ids(settings) == ["agentconsole.E001"]


def test_the_check_is_a_deploy_security_check() -> None:
    from django.core.checks import registry

    deploy = registry.registry.get_checks(include_deployment_checks=True)
    plain = registry.registry.get_checks(include_deployment_checks=False)
    assert check_no_demo_passwords in deploy
    assert check_no_demo_passwords not in plain
    assert "security" in check_no_demo_passwords.tags
