"""Ids the runtime mints, kept out of every namespace an input can reach (issue 9 item 4).

Inputs name things too: a scenario names its confirmations ("c1"), a planner names its proposals
("p1") and cites observations. Every such id is validated against ``INPUT_ID_PATTERN`` (letters,
digits, ``_ . : -``). Every id the runtime mints for a row that an input can also name carries
``MINTED_MARK``, a character that pattern excludes, so the two sets are disjoint by
construction, whatever a caller picks. (They once shared one key space: a scenario confirmation
"c1" and the runtime's step-1 request were both ``<run>:c1``.)

Ids the runtime mints where no input names anything need no mark: observations (``tool-<n>``;
an input only *cites* them), grants (``<run>:g<n>``; no input names a grant), working-memory
items, handoff and ledger row numbers.
"""

from __future__ import annotations

import re

MINTED_MARK = "~"
INPUT_ID_PATTERN = r"^[A-Za-z0-9_.:\-]+$"
_INPUT_ID = re.compile(INPUT_ID_PATTERN)


def is_input_id(value: str) -> bool:
    return bool(_INPUT_ID.fullmatch(value))


def minted_confirmation_id(run_id: str, step: int) -> str:
    """The confirmation the runtime asks for at ``step`` (at most one new request per step)."""
    return f"{run_id}{MINTED_MARK}c{step}"


def caller_confirmation_id(run_id: str, name: str) -> str:
    """A confirmation a caller named: scoped by the run, never containing ``MINTED_MARK``."""
    if not is_input_id(name):
        raise ValueError(f"confirmation id {name!r} must match {INPUT_ID_PATTERN}")
    return f"{run_id}:{name}"
