"""How the product's modules import each other: one way, from the entry points down to the kernel.

The product is every ``.py`` file under ``agentconsole/``, ``runs/``, ``memory/``, ``policy/`` and
``notify/`` except migrations (frozen history that Django's loader runs and no module imports).
Files are parsed with ``ast``, never imported. The rules, each with tests of its own below:

1. No import cycle between product modules. Every import counts, at module level or inside a
   function (an import inside a function only postpones the cycle to the first call). Importing
   ``a.b.c`` also imports the packages ``a`` and ``a.b`` (their ``__init__``), so those count too,
   except a module's own packages (Python initialises them before the module, never after).
2. ``agentconsole.wiring``, the composition root, is imported only by entry points
   (``ENTRY_POINTS``: Celery tasks, API views, console and admin views, consumers, management
   commands, url modules, the isolated tool child and the project package's modules but its
   kernel and its Celery app). Services and selectors receive what they need.
3. The apps (``runs``, ``memory``, ``policy``, ``notify``) import nothing from the project package
   ``agentconsole`` but its kernel (``agentconsole.kernel``: the shared infrastructure, such as
   ``agentconsole.kernel.http``, ``agentconsole.kernel.roles``), the composition root (entry
   points only, rule 2) and the Celery app.
4. No import inside a function, unless a comment containing ``import here:`` says why: on the
   import's own line, or in the comment lines directly above the block of imports it belongs to.
5. The kernel (``agentconsole/kernel/``) imports no app and nothing of ``agentconsole`` outside
   the kernel: everything stands on it, so it stands on nothing of theirs. The one named
   exception, ``KERNEL_FROM_APPS``: three modules of ``policy.domain``, plain Python that imports
   nothing internal.
6. No app imports up into entry points: a module that is not itself an entry point never imports
   one (a service does not import a task module, a view, an API, a url module or a root module
   of ``agentconsole``). The module imported counts, not the packages above it (importing
   ``agentconsole.kernel.http`` runs ``agentconsole/__init__.py``, which imports nothing).

Together: entry points -> the apps' services and selectors -> domain -> kernel, one way.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from fnmatch import fnmatch
from pathlib import Path

import pytest

from tests.architecture.test_domain_imports import imported_names

ROOT = Path(__file__).resolve().parents[2]
PRODUCT_PACKAGES = ("agentconsole", "runs", "memory", "policy", "notify")
WIRING = "agentconsole.wiring"
# Paths (relative to the repository root, fnmatch patterns; ``*`` also crosses ``/``).
ENTRY_POINTS = (
    "agentconsole/*",
    "*/urls.py",
    "runs/tasks.py",
    "memory/tasks.py",
    "notify/tasks.py",
    "*/apis.py",
    "*/views.py",
    "*/views/*.py",
    "*/consumers.py",
    "*/management/commands/*.py",
    # The Django admin's pages are views too (they mask arguments with the tool registry).
    "*/admin.py",
    # The isolated tool child is a process's main: it sets Django up and looks the tool up.
    "runs/engine/isolated_child.py",
)
# Under agentconsole/ but not entry points: the kernel, and the Celery app the apps' tasks and
# the fault lab send with (its worker's signals are connected from ops: celery_signals.py).
NOT_ENTRY_POINTS = ("agentconsole/kernel/*", "agentconsole/celery.py")
KERNEL = "agentconsole.kernel"
REASON_MARK = "import here:"
APPS = ("runs", "memory", "policy", "notify")
# What an app may import from the project package (rule 2 limits the first to entry points).
FROM_PROJECT = (WIRING, "agentconsole.celery", KERNEL)
# What the kernel may import from the apps, and why (rule 5): the errors every domain raises and
# the JSON forms the HTTP edge and the pages read. They are plain Python at the bottom of the
# domain order and import nothing internal; moving them into the kernel would make every domain
# core import a Django-side package (tests/architecture/test_domain_imports.py forbids it).
KERNEL_FROM_APPS = {
    "policy.domain.errors": "DomainError: its code gives the HTTP status (status.py, http.py)",
    "policy.domain.strict_json": "the API's strict JSON parser (http.py)",
    "policy.domain.canonical": "canonical and pretty JSON the pages and the admin show",
}


def product_files() -> Iterator[Path]:
    for package in PRODUCT_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.relative_to(ROOT).parts:
                yield path


def module_name(relative: str) -> tuple[str, bool]:
    """Dotted name of a file given by its path relative to ROOT; and whether it is a package."""
    parts = list(Path(relative).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def import_graph(sources: Mapping[str, str]) -> dict[str, set[str]]:
    """Module -> the product modules it imports, from ``{relative path: source}``."""
    modules = {relative: module_name(relative) for relative in sources}
    known = {name for name, _ in modules.values()}
    graph: dict[str, set[str]] = {name: set() for name in known}
    for relative, source in sources.items():
        name, is_package = modules[relative]
        for imported in imported_names(source, name, is_package=is_package):
            parts = imported.split(".")
            # The module itself (the longest known prefix), then the packages above it; not the
            # importer's own packages, which are initialised before it.
            targets = [".".join(parts[:i]) for i in range(len(parts), 0, -1)]
            graph[name].update(
                t for t in targets if t in known and t != name and not name.startswith(t + ".")
            )
    return graph


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """One cycle (``[a, b, …, a]``) per strongly connected component of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def connect(v: str) -> None:  # Tarjan's algorithm; the graph is small, recursion is fine
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return [_a_cycle(graph, component) for component in components]


def _a_cycle(graph: Mapping[str, Iterable[str]], component: set[str]) -> list[str]:
    """A shortest path from the component's first module back to itself (breadth first)."""
    start = min(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph.get(v, ())):
            if w == start:
                return [*paths[v], start]
            if w in component and w not in paths:
                paths[w] = [*paths[v], w]
                queue.append(w)
    raise AssertionError("a strongly connected component always has a cycle")


def is_entry_point(relative: str) -> bool:
    return any(fnmatch(relative, pattern) for pattern in ENTRY_POINTS) and not any(
        fnmatch(relative, pattern) for pattern in NOT_ENTRY_POINTS
    )


def wiring_violations(relative: str, source: str) -> list[str]:
    if is_entry_point(relative):
        return []
    name, is_package = module_name(relative)
    return [
        f"{relative}: imports {imported} (only entry points use the composition root)"
        for imported in imported_names(source, name, is_package=is_package)
        if imported == WIRING or imported.startswith(WIRING + ".")
    ]


def project_import_violations(relative: str, source: str) -> list[str]:
    name, is_package = module_name(relative)
    if name.split(".")[0] not in APPS:
        return []
    return [
        f"{relative}: imports {imported} (the project package sits on top of the apps)"
        for imported in imported_names(source, name, is_package=is_package)
        if imported.split(".")[0] == "agentconsole"
        and not any(imported == ok or imported.startswith(ok + ".") for ok in FROM_PROJECT)
    ]


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def kernel_import_violations(relative: str, source: str) -> list[str]:
    name, is_package = module_name(relative)
    if not _under(name, KERNEL):
        return []
    found = []
    for imported in imported_names(source, name, is_package=is_package):
        root = imported.split(".")[0]
        if root in APPS and not any(_under(imported, ok) for ok in KERNEL_FROM_APPS):
            found.append(f"{relative}: imports {imported} (the kernel imports no app)")
        elif root == "agentconsole" and not _under(imported, KERNEL):
            found.append(f"{relative}: imports {imported} (the project root sits on the kernel)")
    return found


def entry_point_import_violations(
    relative: str, source: str, modules: Mapping[str, str]
) -> list[str]:
    """Entry points a non-entry-point module imports; ``modules``: dotted name -> relative path
    of every product module (the imported module is the longest known prefix of a name)."""
    if is_entry_point(relative):
        return []
    name, is_package = module_name(relative)
    found = []
    for imported in imported_names(source, name, is_package=is_package):
        parts = imported.split(".")
        target = next(
            (t for t in (".".join(parts[:i]) for i in range(len(parts), 0, -1)) if t in modules),
            None,
        )
        if target and target != name and is_entry_point(modules[target]):
            found.append(
                f"{relative}: imports {target} (an entry point; nothing below imports one)"
            )
    return found


def in_function_import_violations(relative: str, source: str) -> list[str]:
    tree = ast.parse(source)
    lines = source.splitlines()
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            inside.update(
                id(n) for n in ast.walk(node) if isinstance(n, ast.Import | ast.ImportFrom)
            )
    found = []
    for statements in _statement_lists(tree):
        head = None
        for statement in statements:
            if not isinstance(statement, ast.Import | ast.ImportFrom):
                head = None
                continue
            head = head or statement
            if id(statement) in inside and not _explained(lines, statement, head):
                found.append(f"{relative}:{statement.lineno}: {ast.unparse(statement)}")
    return found


def _statement_lists(tree: ast.AST) -> Iterator[list[ast.stmt]]:
    for node in ast.walk(tree):
        for _, value in ast.iter_fields(node):
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                yield value


def _explained(lines: list[str], statement: ast.stmt, head: ast.stmt) -> bool:
    own = lines[statement.lineno - 1 : statement.end_lineno]
    above = []
    i = head.lineno - 2
    while i >= 0 and lines[i].strip().startswith("#"):
        above.append(lines[i])
        i -= 1
    return any(REASON_MARK in line for line in own + above)


def product_sources() -> dict[str, str]:
    return {
        path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8")
        for path in product_files()
    }


def test_no_import_cycle_between_product_modules() -> None:
    found = cycles(import_graph(product_sources()))
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_only_entry_points_import_the_composition_root() -> None:
    found = [v for rel, src in product_sources().items() for v in wiring_violations(rel, src)]
    assert not found, "\n".join(found)


def test_apps_import_from_the_project_only_its_kernel_root_and_celery_app() -> None:
    found = [
        v for rel, src in product_sources().items() for v in project_import_violations(rel, src)
    ]
    assert not found, "\n".join(found)


def test_the_kernel_imports_no_app_and_nothing_of_the_root() -> None:
    found = [
        v for rel, src in product_sources().items() for v in kernel_import_violations(rel, src)
    ]
    assert not found, "\n".join(found)


def test_no_app_imports_up_into_an_entry_point() -> None:
    sources = product_sources()
    modules = {module_name(relative)[0]: relative for relative in sources}
    found = [
        v for rel, src in sources.items() for v in entry_point_import_violations(rel, src, modules)
    ]
    assert not found, "\n".join(found)


def test_no_import_inside_a_function_without_a_reason() -> None:
    found = [
        v for rel, src in product_sources().items() for v in in_function_import_violations(rel, src)
    ]
    assert not found, "imports inside functions without an 'import here:' comment:\n" + "\n".join(
        found
    )


# The checks below prove that each rule catches what it is meant to catch.


def _sources(spec: str) -> dict[str, str]:
    """Module sources from lines ``path: source``, ``|`` standing for a line break."""
    files = (line.strip().partition(": ") for line in spec.strip().splitlines())
    return {path: source.replace("|", "\n") + "\n" * bool(source) for path, _, source in files}


# (module sources, the cycles found)
CYCLES = {
    "through an import inside a function": (
        """
        runs/services.py: from runs import tasks
        runs/tasks.py: def sweep():|    from runs.sweeper import sweep
        runs/sweeper.py: import runs.services
        runs/models.py:
        """,
        [["runs.services", "runs.tasks", "runs.sweeper", "runs.services"]],
    ),
    "through a package init, which counts as imported": (
        """
        agentconsole/__init__.py: from agentconsole.celery import app
        agentconsole/celery.py: from runs.fault_lab.faultlab import QUEUE
        runs/fault_lab/faultlab.py: from agentconsole.wiring import store
        agentconsole/wiring.py:
        """,
        [["agentconsole", "agentconsole.celery", "runs.fault_lab.faultlab", "agentconsole"]],
    ),
    "none in an acyclic graph": (
        """
        agentconsole/__init__.py: from agentconsole.celery import app
        agentconsole/celery.py: import os
        agentconsole/wiring.py: from runs import services|from memory import services
        memory/services.py: from runs.services import run_values_erase
        runs/services.py: from runs.orm.store import OrmRunStore
        runs/orm/store.py:
        """,
        [],
    ),
}


@pytest.mark.parametrize("case", CYCLES)
def test_cycles_are_found(case: str) -> None:
    spec, expected = CYCLES[case]
    assert cycles(import_graph(_sources(spec))) == expected


@pytest.mark.parametrize(
    ("relative", "source", "flagged"),
    [
        ("runs/services.py", "from agentconsole import wiring\n", True),
        ("memory/selectors.py", "def f():\n    from agentconsole.wiring import registry\n", True),
        ("runs/people/handoffs.py", "import agentconsole.wiring as w\n", True),
        ("runs/apis.py", "from agentconsole import wiring\n", False),
        ("runs/tasks.py", "from agentconsole import wiring\n", False),
        ("runs/management/commands/sweep.py", "from agentconsole import wiring\n", False),
        ("agentconsole/apps.py", "from agentconsole import wiring\n", False),
        ("agentconsole/ops/metrics.py", "from agentconsole import wiring\n", False),
        ("runs/urls.py", "from agentconsole import wiring\n", False),
        ("agentconsole/kernel/pages.py", "from agentconsole import wiring\n", True),
        ("agentconsole/celery.py", "from agentconsole import wiring\n", True),
        ("runs/services.py", "from agentconsole.kernel.roles import actor_name\n", False),
    ],
)
def test_the_composition_root_rule(relative: str, source: str, flagged: bool) -> None:
    assert bool(wiring_violations(relative, source)) is flagged


# (importing module, its source) -> whether the project-package rule flags it
PROJECT_PACKAGE_CASES = {
    ("runs/apis.py", "from agentconsole.api import StrictSerializer\n"): True,
    ("memory/admin.py", "from agentconsole import admin_base\n"): True,
    ("runs/services.py", "def f():\n    import agentconsole.roles\n"): True,
    ("runs/apis.py", "from agentconsole import wiring\n"): False,
    ("runs/fault_lab/faultlab.py", "from agentconsole.celery import app\n"): False,
    ("runs/apis.py", "from agentconsole.kernel.http import StrictSerializer\n"): False,
    ("memory/admin.py", "from agentconsole.kernel import admin_base\n"): False,
    ("notify/views.py", "from agentconsole.kernel.pages import role_required\n"): False,
    ("runs/services.py", "from agentconsole.ops import metrics\n"): True,
    ("memory/views.py", "from agentconsole.access.auth import live_token\n"): True,
    ("policy/selectors.py", "import agentconsole\n"): True,
    ("agentconsole/urls.py", "from agentconsole.errors import error_response\n"): False,
}


@pytest.mark.parametrize(("relative", "source"), PROJECT_PACKAGE_CASES)
def test_the_project_package_rule(relative: str, source: str) -> None:
    flagged = PROJECT_PACKAGE_CASES[relative, source]
    assert bool(project_import_violations(relative, source)) is flagged


@pytest.mark.parametrize(
    ("source", "flagged_lines"),
    [
        ("import json\n\ndef f():\n    return json\n", []),
        ("def f():\n    import json\n", [2]),
        ("class C:\n    def m(self):\n        from runs import models\n", [3]),
        ("def f():\n    import json  # import here: a reason\n", []),
        ("def f():\n    # import here: a reason\n    import json\n", []),
        # One comment above a block explains the block, also across isort's blank lines.
        (
            "def f():\n    # import here: why\n    # more why\n    import json\n\n"
            "    from runs import models\n",
            [],
        ),
        # A comment above an earlier statement explains nothing further down.
        ("def f():\n    # import here: why\n    x = 1\n    import json\n", [4]),
        ("f = lambda: __import__('json')\ndef g():\n    if True:\n        import os\n", [4]),
    ],
)
def test_the_import_inside_a_function_rule(source: str, flagged_lines: list[int]) -> None:
    found = in_function_import_violations("runs/x.py", source)
    assert [int(v.split(":")[1]) for v in found] == flagged_lines


# (kernel module, its source) -> whether the kernel rule flags it
KERNEL_CASES = {
    ("agentconsole/kernel/http.py", "from runs.models import Run\n"): True,
    ("agentconsole/kernel/pages.py", "from policy import selectors\n"): True,
    ("agentconsole/kernel/roles.py", "def f():\n    from memory import services\n"): True,
    ("agentconsole/kernel/__init__.py", "from notify.models import Delivery\n"): True,
    ("agentconsole/kernel/roles.py", "from agentconsole.access import auth\n"): True,
    ("agentconsole/kernel/sqlbatch.py", "from agentconsole import celery\n"): True,
    (
        "agentconsole/kernel/admin_base.py",
        "from policy.domain.registry import ToolRegistry\n",
    ): True,
    ("agentconsole/kernel/http.py", "from policy.domain.strict_json import JsonRefused\n"): False,
    ("agentconsole/kernel/status.py", "from policy.domain.errors import DomainError\n"): False,
    (
        "agentconsole/kernel/pages.py",
        "from agentconsole.kernel.status import domain_status\n",
    ): False,
    ("agentconsole/kernel/pages.py", "from . import status\n"): False,
    ("agentconsole/kernel/http.py", "from django.conf import settings\n"): False,
    ("agentconsole/ops/metrics.py", "from runs import models\n"): False,
}


@pytest.mark.parametrize(("relative", "source"), KERNEL_CASES)
def test_the_kernel_rule(relative: str, source: str) -> None:
    flagged = KERNEL_CASES[relative, source]
    assert bool(kernel_import_violations(relative, source)) is flagged


# The product modules the entry-point cases below know, by their paths.
CASE_MODULES = {
    module_name(relative)[0]: relative
    for relative in (
        "agentconsole/__init__.py",
        "agentconsole/celery.py",
        "agentconsole/urls.py",
        "agentconsole/kernel/__init__.py",
        "agentconsole/kernel/http.py",
        "agentconsole/kernel/roles.py",
        "agentconsole/ops/__init__.py",
        "agentconsole/ops/metrics.py",
        "agentconsole/ops/worker_lifecycle.py",
        "memory/apis.py",
        "memory/services.py",
        "runs/__init__.py",
        "runs/apis.py",
        "runs/fault_lab/faultlab.py",
        "runs/services.py",
        "runs/tasks.py",
        "runs/urls.py",
        "runs/views/__init__.py",
        "runs/views/runs.py",
    )
}

# (importing module, its source) -> whether the entry-point rule flags it
ENTRY_POINT_CASES = {
    ("runs/services.py", "from runs import tasks\n"): True,
    ("runs/fault_lab/faultlab.py", "from runs.views.runs import run_page\n"): True,
    ("memory/services.py", "def f():\n    from memory.apis import MemorySerializer\n"): True,
    ("runs/services.py", "from agentconsole.ops import metrics\n"): True,
    ("agentconsole/kernel/http.py", "from agentconsole.urls import urlpatterns\n"): True,
    ("agentconsole/celery.py", "from agentconsole.ops import worker_lifecycle\n"): True,
    ("runs/services.py", "import agentconsole\n"): True,
    ("runs/fault_lab/faultlab.py", "from agentconsole.celery import app\n"): False,
    ("runs/services.py", "from agentconsole.kernel.roles import actor_name\n"): False,
    ("runs/services.py", "import agentconsole.kernel.http\n"): False,
    ("runs/tasks.py", "from runs import services\n"): False,
    ("runs/urls.py", "from runs.views import runs\n"): False,
    ("runs/apis.py", "from runs import tasks\n"): False,
    ("agentconsole/ops/metrics.py", "from agentconsole.ops import worker_lifecycle\n"): False,
    ("runs/services.py", "from runs.fault_lab import faultlab\n"): False,
}


@pytest.mark.parametrize(("relative", "source"), ENTRY_POINT_CASES)
def test_the_entry_point_rule(relative: str, source: str) -> None:
    flagged = ENTRY_POINT_CASES[relative, source]
    assert bool(entry_point_import_violations(relative, source, CASE_MODULES)) is flagged
