"""mypy checks every product module, and excuses none (issue 25 item 6).

An ``ignore_errors`` override is how a module leaves the type check without anyone noticing: the
list grew to 13 modules, and behind it sat a real mix-up (``runs/people/handoffs.py`` reused its
runs context's name for a tool context). ``ignore_missing_imports`` stays allowed for third-party
packages that publish no stubs, never for ours.
"""

from __future__ import annotations

import tomllib
from typing import Any

from tests.architecture.test_size import PACKAGES, ROOT


def mypy_config() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        config: dict[str, Any] = tomllib.load(handle)["tool"]["mypy"]
    return config


def _ours(module: str) -> bool:
    return module.split(".")[0] in PACKAGES


def test_mypy_checks_every_product_package() -> None:
    assert sorted(mypy_config()["files"]) == sorted(PACKAGES)


def test_no_module_is_excused_from_mypy() -> None:
    excused = [
        module
        for override in mypy_config().get("overrides", [])
        if override.get("ignore_errors")
        for module in override["module"]
    ]
    assert excused == []


def test_missing_imports_are_ignored_for_third_party_packages_only() -> None:
    ours = [
        module
        for override in mypy_config().get("overrides", [])
        if override.get("ignore_missing_imports")
        for module in override["module"]
        if _ours(module)
    ]
    assert ours == []
