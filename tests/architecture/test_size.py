"""No product function over 80 lines, no product module over 500 lines, and no folder with more
than 20 modules side by side (rules of the house).

Long functions and modules are where a reader loses the thread: the step decision, the store's
writes and the benchmarks all grew past what one screen shows before they were split. The test
parses every product module with ``ast`` (migrations and tests are not product code).

A crowded folder loses the reader the same way one level up: ``runs/`` held 47 modules, the
engine beside the web layer, the demo and the fault lab (issue 25 item 2). Each folder of the
product, of the tests, the benchmarks and the soak holds at most ``MAX_FOLDER_MODULES`` ``.py``
files (``__init__`` and ``conftest`` count; migrations do not); past that, it gets subpackages
whose names say what they hold.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("agentconsole", "policy", "runs", "memory", "notify", "bench", "soak")
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 500
# Folders whose modules are counted: the product's, and the tests', benchmarks' and soak's.
FOLDER_ROOTS = ("agentconsole", "policy", "runs", "memory", "notify", "tests", "bench", "soak")
MAX_FOLDER_MODULES = 20

# Exceptions to the limits, if one is ever needed, with the reason beside it. Empty: every product
# function and module is within them. The second test below keeps the set honest (it only shrinks).
KNOWN_OVERSIZE: frozenset[str] = frozenset()
# Folders over MAX_FOLDER_MODULES, each with its reason; the list only shrinks (a test below).
# Folders allowed over the limit, with the reason beside each. Empty: every folder is within it.
KNOWN_CROWDED: frozenset[str] = frozenset()


def product_modules(root: Path = ROOT) -> list[Path]:
    return sorted(
        path
        for package in PACKAGES
        for path in (root / package).rglob("*.py")
        if "migrations" not in path.relative_to(root).parts
    )


def oversize(source: str, name: str) -> dict[str, int]:
    """Every function over MAX_FUNCTION_LINES and the module itself if over MAX_MODULE_LINES,
    keyed as in KNOWN_OVERSIZE, with their lengths."""
    found: dict[str, int] = {}
    lines = len(source.splitlines())
    if lines > MAX_MODULE_LINES:
        found[name] = lines
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            start = node.decorator_list[0].lineno if node.decorator_list else node.lineno
            length = (node.end_lineno or node.lineno) - start + 1
            if length > MAX_FUNCTION_LINES:
                found[f"{name}::{node.name}"] = length
    return found


def all_oversize() -> dict[str, int]:
    found: dict[str, int] = {}
    for path in product_modules():
        name = path.relative_to(ROOT).as_posix()
        found.update(oversize(path.read_text(encoding="utf-8"), name))
    return found


def crowded_folders(root: Path = ROOT) -> dict[str, int]:
    """Every folder under FOLDER_ROOTS with more than MAX_FOLDER_MODULES ``.py`` files side by
    side (migrations excluded), keyed by its path relative to ``root``, with its count."""
    counts: dict[str, int] = {}
    for top in FOLDER_ROOTS:
        for path in (root / top).rglob("*.py"):
            relative = path.relative_to(root)
            if "migrations" not in relative.parts:
                folder = relative.parent.as_posix()
                counts[folder] = counts.get(folder, 0) + 1
    return {folder: n for folder, n in sorted(counts.items()) if n > MAX_FOLDER_MODULES}


def test_no_folder_holds_more_than_20_modules_side_by_side() -> None:
    new = {k: v for k, v in crowded_folders().items() if k not in KNOWN_CROWDED}
    assert not new, (
        f"more than {MAX_FOLDER_MODULES} modules side by side (give the folder subpackages whose"
        " names say what they hold):\n"
        + "\n".join(f"  {folder}/: {n} modules" for folder, n in new.items())
    )


def test_known_crowded_entries_are_still_crowded() -> None:
    """Once a folder is split, remove it from KNOWN_CROWDED: the list only shrinks."""
    gone = sorted(KNOWN_CROWDED - set(crowded_folders()))
    assert not gone, "no longer crowded, remove from KNOWN_CROWDED: " + ", ".join(gone)


def test_no_function_or_module_over_the_limits() -> None:
    new = {k: v for k, v in all_oversize().items() if k not in KNOWN_OVERSIZE}
    assert not new, "over the size limits (functions 80 lines, modules 500):\n" + "\n".join(
        f"  {name}: {length} lines" for name, length in sorted(new.items())
    )


def test_known_oversize_entries_are_still_oversize() -> None:
    """Once an entry is split, remove it from KNOWN_OVERSIZE: the list only shrinks."""
    gone = sorted(KNOWN_OVERSIZE - set(all_oversize()))
    assert not gone, "no longer oversize, remove from KNOWN_OVERSIZE: " + ", ".join(gone)


def test_every_product_package_is_scanned() -> None:
    scanned = {path.relative_to(ROOT).parts[0] for path in product_modules()}
    assert scanned == set(PACKAGES)


# The checker's own tests.


def test_a_long_function_is_found_with_its_length() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(85))
    assert oversize(f"def f():\n{body}\n", "m.py") == {"m.py::f": 86}


def test_decorators_and_methods_count() -> None:
    body = "\n".join(f"        x{i} = {i}" for i in range(79))
    source = f"class C:\n    @staticmethod\n    def g():\n{body}\n"
    assert oversize(source, "m.py") == {"m.py::g": 81}


@pytest.mark.parametrize(("lines", "flagged"), [(500, False), (501, True)])
def test_a_long_module_is_found(lines: int, flagged: bool) -> None:
    source = "\n".join(f"x{i} = {i}" for i in range(lines)) + "\n"
    assert ("m.py" in oversize(source, "m.py")) is flagged


def test_migrations_are_not_product_code(tmp_path: Path) -> None:
    for package in PACKAGES:
        (tmp_path / package / "migrations").mkdir(parents=True)
        (tmp_path / package / "migrations" / "0001_initial.py").write_text("x = 1\n")
        (tmp_path / package / "models.py").write_text("x = 1\n")
    names = {p.relative_to(tmp_path).as_posix() for p in product_modules(tmp_path)}
    assert names == {f"{package}/models.py" for package in PACKAGES}


def test_a_crowded_folder_is_found_with_its_count(tmp_path: Path) -> None:
    """21 modules side by side are found, 20 are not; a subpackage counts apart, migrations and
    files that are not Python never count, and every folder root is scanned."""
    for top in FOLDER_ROOTS:
        (tmp_path / top).mkdir()
    crowded, fine, migrations = tmp_path / "runs", tmp_path / "tests" / "api", tmp_path / "policy"
    fine.mkdir()
    for i in range(20):
        (crowded / f"m{i}.py").write_text("x = 1\n")
        (crowded / f"data{i}.json").write_text("{}\n")
        (fine / f"test_{i}.py").write_text("x = 1\n")
        (migrations / "migrations").mkdir(exist_ok=True)
        (migrations / "migrations" / f"{i:04}_m.py").write_text("x = 1\n")
    (crowded / "__init__.py").write_text("")
    (crowded / "orm").mkdir()
    (crowded / "orm" / "store.py").write_text("x = 1\n")
    (migrations / "migrations" / "__init__.py").write_text("")
    assert crowded_folders(tmp_path) == {"runs": 21}
    (tmp_path / "soak" / "deep" / "er").mkdir(parents=True)
    for i in range(21):
        (tmp_path / "soak" / "deep" / "er" / f"m{i}.py").write_text("x = 1\n")
    assert crowded_folders(tmp_path) == {"runs": 21, "soak/deep/er": 21}
