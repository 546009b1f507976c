"""One owner per record (issue 25 item 4): other apps' models are never imported.

Each app (``runs``, ``memory``, ``policy``, ``notify``) owns its models and the services,
selectors and API over them. Another app, or the project package ``agentconsole``, reads and
writes those rows only through the owner's services and selectors (plain functions that take and
return values, or statements of ``agentconsole.kernel.sqlbatch`` a caller composes into its own
transaction), never through the model classes: so an app's tables can change behind its
functions, and every rule about a record is in one place.

The rule: no module of the product imports ``<app>.models``, ``<app>.<sub>.models`` (say
``runs.calls.models``) or anything in them, in any spelling (``import``, ``from … import``,
``from <app> import models``, a relative import, ``importlib.import_module`` with a literal
name; at module level or inside a function), unless ``<app>`` is the module's own app.
Migrations (frozen history, each naming its own app's models) and tests are not product code.
Files are parsed with ``ast``, never imported.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.architecture.test_domain_imports import imported_names

ROOT = Path(__file__).resolve().parents[2]
APPS = ("runs", "memory", "policy", "notify")
# The project package imports nothing of an app's models either: it calls the apps' selectors.
PRODUCT_PACKAGES = ("agentconsole", *APPS)


def _sources() -> Iterator[tuple[str, str]]:
    for package in PRODUCT_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if "migrations" not in relative.parts:
                yield relative.as_posix(), path.read_text(encoding="utf-8")


def _module(relative: str) -> tuple[str, bool]:
    """Dotted name of a file given by its path relative to ROOT; and whether it is a package."""
    parts = list(Path(relative).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def models_owner(imported: str) -> str | None:
    """The app whose models ``imported`` names (``runs`` for ``runs.calls.models.ModelCall``), or
    None when it names no app's models."""
    parts = imported.split(".")
    if parts[0] in APPS and "models" in parts[1:]:
        return parts[0]
    return None


def foreign_model_imports(relative: str, source: str) -> list[str]:
    """Each import of another app's models by the module at ``relative``."""
    name, is_package = _module(relative)
    own = name.split(".")[0]
    return [
        f"{relative}: imports {imported} (owned by {owner}: call its services or selectors)"
        for imported in imported_names(source, name, is_package=is_package)
        if (owner := models_owner(imported)) is not None and owner != own
    ]


def test_other_apps_models_are_never_imported() -> None:
    found = [v for relative, source in _sources() for v in foreign_model_imports(relative, source)]
    assert not found, "\n".join(found)


# The checks below prove that the rule flags what it must and passes what it must.

# (importing module, its source) -> whether the rule flags it
CASES = {
    # Every spelling of another app's models, from each app and from the project package.
    ("runs/selectors.py", "from policy.models import Confirmation\n"): True,
    ("runs/orm/writers.py", "from memory import models\n"): True,
    ("runs/people/batch.py", "import policy.models\n"): True,
    ("runs/fault_lab/faultlab.py", "import memory.models as mm\n"): True,
    ("agentconsole/ops/metrics.py", "from runs import models as m\n"): True,
    ("agentconsole/ops/metrics.py", "from runs.calls.models import ModelCall\n"): True,
    ("agentconsole/ops/metrics.py", "from runs.calls import models\n"): True,
    ("memory/services.py", "from runs.models import Run\n"): True,
    ("notify/services.py", "from policy.models import Grant\n"): True,
    ("policy/apis.py", "from notify.models import Subscription\n"): True,
    # Inside a function, or through importlib: still an import.
    ("runs/apis.py", "def f():\n    from policy.models import Grant  # import here: x\n"): True,
    ("runs/x.py", "import importlib\nM = importlib.import_module('memory.models')\n"): True,
    # A relative import that climbs into another app.
    ("runs/calls/x.py", "from ...policy.models import Grant\n"): True,
    # An app's own models, in every spelling: its own.
    ("runs/orm/store.py", "from runs import models as m\n"): False,
    ("runs/orm/writers.py", "from runs.calls.models import ModelCall\n"): False,
    ("runs/calls/records.py", "from .models import ModelCall\n"): False,
    ("runs/calls/gateway.py", "from runs.models import Run\n"): False,
    ("policy/mcp/services.py", "from policy.models import McpServer\n"): False,
    ("memory/tools.py", "from memory.models import PreferenceRecord\n"): False,
    # Another app's services, selectors and domain: what the rule asks for.
    ("runs/orm/writers.py", "from memory.working_rows import working_writes\n"): False,
    ("runs/selectors.py", "from memory import selectors as memory_selectors\n"): False,
    ("agentconsole/ops/metrics.py", "from runs import selectors as run_selectors\n"): False,
    ("agentconsole/ops/metrics.py", "from policy import confirmation_selectors\n"): False,
    ("runs/step.py", "from runs.domain.gateway.model_planning import ModelRequest\n"): False,
    # Django's and DRF's models are nobody's app.
    ("runs/apis.py", "from django.db import models\n"): False,
    ("agentconsole/urls.py", "from rest_framework.authtoken.models import Token\n"): False,
}


@pytest.mark.parametrize(("relative", "source"), CASES)
def test_the_owner_rule(relative: str, source: str) -> None:
    assert bool(foreign_model_imports(relative, source)) is CASES[relative, source]
