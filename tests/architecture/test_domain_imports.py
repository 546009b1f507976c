"""The domain core stays plain Python, and its packages depend on each other in one direction.

1. Every ``.py`` file under ``policy/domain``, ``runs/domain`` and ``memory/domain`` is parsed with
   ``ast`` (never imported, so a bad import cannot hide behind an import error).
2. Each ``import``/``from … import`` (relative ones resolved against the file's package, and
   ``importlib.import_module("…")`` / ``__import__("…")`` with a literal name) becomes an absolute
   module name.
3. A name is forbidden if it belongs to the web/worker stack, or to our Django side
   (``agentconsole``, or ``policy``/``runs``/``memory`` outside their ``.domain`` package), or if it
   breaks the rule ``policy.domain`` <- ``memory.domain`` <- ``runs.domain``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOMAIN_APPS = ("policy", "runs", "memory", "notify")

# Third-party (and project) roots that belong to the Django/web/worker side.
FORBIDDEN_ROOTS = frozenset(
    {
        "django",
        "rest_framework",
        "channels",
        "channels_redis",
        "daphne",
        "celery",
        "kombu",
        "redis",
        "psycopg",
        "psycopg2",
        "agentconsole",
        # Tracing goes through the port in runs.domain.telemetry; the adapter is Django-side.
        "opentelemetry",
    }
)

# Which domain packages each domain package may import (itself included).
ALLOWED_DOMAIN_DEPENDENCIES = {
    "policy": {"policy"},
    "memory": {"policy", "memory"},
    "runs": {"policy", "memory", "runs"},
    "notify": {"policy", "notify"},
}


def _module_of(path: Path) -> tuple[str, bool]:
    """Dotted module name of a file under ROOT, and whether it is a package ``__init__``."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def imported_names(source: str, module: str, *, is_package: bool = False) -> Iterator[str]:
    """Absolute names imported by ``source``, the code of ``module``."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".") if package else []
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join([*base_parts, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            # `from policy import domain` must read as policy.domain, not as policy.
            for alias in node.names:
                yield base if alias.name == "*" else f"{base}.{alias.name}"
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and (
                (isinstance(node.func, ast.Name) and node.func.id == "__import__")
                or (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
            )
        ):
            yield node.args[0].value


def violations(name: str, app: str) -> list[str]:
    """Why ``name`` may not be imported from ``<app>.domain`` (empty when it may)."""
    root = name.split(".")[0]
    if root in FORBIDDEN_ROOTS:
        return [f"imports {name} (web/worker stack)"]
    if root in DOMAIN_APPS:
        if not (name == f"{root}.domain" or name.startswith(f"{root}.domain.")):
            return [f"imports {name} (Django side of {root})"]
        if root not in ALLOWED_DOMAIN_DEPENDENCIES[app]:
            return [f"imports {name} ({app}.domain may not depend on {root})"]
    return []


def domain_files() -> Iterator[tuple[str, Path]]:
    for app in DOMAIN_APPS:
        yield from ((app, path) for path in sorted((ROOT / app / "domain").rglob("*.py")))


def domain_violations() -> list[str]:
    found = []
    for app, path in domain_files():
        module, is_package = _module_of(path)
        source = path.read_text(encoding="utf-8")
        for name in imported_names(source, module, is_package=is_package):
            found.extend(f"{path.relative_to(ROOT)}: {why}" for why in violations(name, app))
    return found


def test_domain_core_imports_no_framework_and_respects_layering() -> None:
    found = domain_violations()
    assert not found, "forbidden imports in the domain core:\n" + "\n".join(found)


# The checks below keep the rule honest while the domain folders are still (nearly) empty.


@pytest.mark.parametrize(
    ("source", "module", "expected"),
    [
        ("import django.db", "policy.domain.gate", ["django.db"]),
        ("from rest_framework import fields", "policy.domain.gate", ["rest_framework.fields"]),
        ("from ..models import Run", "runs.domain.decide", ["runs.models.Run"]),
        ("from .. import services", "memory.domain.working", ["memory.services"]),
        ("import importlib\nimportlib.import_module('celery')", "runs.domain.decide", ["celery"]),
        ("from runs import domain", "runs.domain.decide", []),
        ("from . import machine", "runs.domain.decide", []),
        ("from policy.domain.canonical import canonical", "runs.domain.decide", []),
        ("import hashlib, jsonschema, pydantic", "policy.domain.schemas", []),
    ],
)
def test_checker_flags_framework_and_django_side_imports(
    source: str, module: str, expected: list[str]
) -> None:
    app = module.split(".")[0]
    assert [n for n in imported_names(source, module) if violations(n, app)] == expected


# "app -> imported module": whether the dependency direction allows it
DIRECTIONS = {
    "policy -> runs.domain.machine": False,
    "policy -> memory.domain.preferences": False,
    "memory -> runs.domain.machine": False,
    "memory -> policy.domain.grants": True,
    "runs -> memory.domain.working": True,
    "runs -> policy.domain.gate": True,
}


@pytest.mark.parametrize("edge", DIRECTIONS)
def test_checker_enforces_dependency_direction(edge: str) -> None:
    importer, _, imported = edge.partition(" -> ")
    assert (violations(imported, importer) == []) is DIRECTIONS[edge]
