"""Policy by argument (issue 23 item 3): what a tool call may do with an argument whose value
derives from untrusted content (policy.domain.origins.provenance).

Each top-level argument of a tool has one rule:

- ``refuse``: the call is refused at the gate (``UNTRUSTED_ARGUMENT_REFUSED``): a recipient, an
  IBAN, a URL to fetch: no person should be asked to spot the attacker's value;
- ``confirm``: the call waits for a person's confirmation of its exact arguments;
- ``carry``: the argument may carry untrusted content (an e-mail's body, a note's text) and
  asks nothing by itself.

Where a rule comes from, first match wins: the run's tool policy naming the argument
(``{"arguments": {"to": "refuse"}}``); the tool contract's ``untrusted_arguments`` (what the tool's
author ships; not under a policy of ``confirmation: never``, the deployment's explicit choice);
then ``confirm`` under ``when_untrusted`` (some argument derives from untrusted content), else
``carry``.

Strictness is total: ``carry`` < ``confirm`` < ``refuse``; a profile may only raise a rule, and
joining two policies takes the stricter rule of each argument.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping


class ArgumentRule(enum.StrEnum):
    CARRY = "carry"
    CONFIRM = "confirm"
    REFUSE = "refuse"


_RANK = {ArgumentRule.CARRY: 0, ArgumentRule.CONFIRM: 1, ArgumentRule.REFUSE: 2}


def stricter(a: ArgumentRule, b: ArgumentRule) -> ArgumentRule:
    return a if _RANK[a] >= _RANK[b] else b


def join_rules(
    a: Mapping[str, ArgumentRule], b: Mapping[str, ArgumentRule]
) -> dict[str, ArgumentRule]:
    out = dict(a)
    for name, rule in b.items():
        out[name] = stricter(out[name], rule) if name in out else rule
    return dict(sorted(out.items()))


def loosened(
    floor: Mapping[str, ArgumentRule], mine: Mapping[str, ArgumentRule]
) -> tuple[str, ArgumentRule, ArgumentRule] | None:
    """The first argument ``mine`` sets below ``floor``: (argument, mine, floor), or None."""
    for name, rule in sorted(mine.items()):
        base = floor.get(name)
        if base is not None and stricter(base, rule) is not rule:
            return name, rule, base
    return None


def rule_for(
    argument: str,
    *,
    named: Mapping[str, ArgumentRule],
    contract: Mapping[str, ArgumentRule],
    never: bool,
    when_untrusted: bool,
) -> ArgumentRule:
    """The rule of one argument (module docstring: policy, contract, then the mode's)."""
    rule = named.get(argument)
    if rule is not None:
        return rule
    if not never:
        rule = contract.get(argument)
        if rule is not None:
            return rule
    return ArgumentRule.CONFIRM if when_untrusted else ArgumentRule.CARRY


def parse_rules(raw: Mapping[str, str], *, inputs: frozenset[str], where: str) -> str | None:
    """Why ``raw`` is no valid set of argument rules for a tool taking ``inputs`` (None: it is)."""
    for name, value in raw.items():
        if name not in inputs:
            return f"{where}: the tool takes no argument {str(name)[:64]!r}"
        if value not in set(ArgumentRule):
            return f"{where}.{name}: must be one of carry, confirm, refuse"
    return None
