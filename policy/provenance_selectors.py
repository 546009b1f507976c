"""Reads of what the runtime recorded about where a confirmation's arguments came from (issue 23
item 4), for the queue's cards and the API's detail, in a fixed number of queries however many
confirmations are asked about.

The trace and the observations are the runs side: their reads are handed down by the page or the
API (``runs.selectors.recorded_provenance`` and ``cited_observations``), as for the queue's
cited sources. The words are policy.domain.origins.provenance_shown's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from policy.domain.origins.provenance_shown import (
    NOT_RECORDED,
    ProvenanceShown,
    grant_refs,
    observation_refs,
    shown,
)
from policy.domain.secrets.redaction import shown_arguments
from policy.models import Grant

# {confirmation id: (run id, proposal id)} -> {confirmation id: (provenance details, checked
# details)}: runs.selectors.recorded_provenance.
RecordedProvenance = Callable[..., Mapping[str, tuple[Any, Any]]]
# {run id: observation ids} -> {(run id, observation id): row}: runs.selectors.cited_observations.
Observations = Callable[..., Mapping[tuple[str, str], Mapping[str, Any]]]


@dataclass(frozen=True)
class Provenances:
    shown: dict[str, ProvenanceShown] = field(default_factory=dict)
    # Every observation the confirmations cite or their records name, by (run id, id).
    observations: Mapping[tuple[str, str], Mapping[str, Any]] = field(default_factory=dict)

    def of(self, confirmation_id: str) -> ProvenanceShown:
        return self.shown.get(confirmation_id, NOT_RECORDED)


def cited_ids(proposal: Any) -> list[str]:
    """The observation ids a proposal cites, in its order, each once."""
    ids = proposal.get("source_observation_ids") if isinstance(proposal, dict) else None
    if not isinstance(ids, list):
        return []
    return list(dict.fromkeys(i for i in ids if isinstance(i, str)))


def confirmations_provenance(
    rows: Iterable[Any],
    *,
    recorded: RecordedProvenance | None,
    observations: Observations,
) -> Provenances:
    """The provenance of each confirmation row (``pk``, ``run_id``, ``proposal``) in words.

    1. The recorded events of all of them (one query; none without ``recorded``).
    2. The observations they cite and their records name (one query, none when there are none).
    3. The capabilities of the grants the records name (one query, only when some are named).
    """
    rows = list(rows)
    wanted = {row.pk: (row.run_id, _proposal_id(row.proposal)) for row in rows}
    held = recorded(wanted=wanted) if recorded is not None and wanted else {}
    ids: dict[str, set[str]] = {}
    named_grants: set[str] = set()
    for row in rows:
        details, _ = held.get(row.pk, (None, None))
        ids.setdefault(row.run_id, set()).update(cited_ids(row.proposal), observation_refs(details))
        named_grants |= grant_refs(details)
    found = observations(cited=ids) if any(ids.values()) else {}
    grants = _capabilities(named_grants)
    out = {}
    for row in rows:
        details, checked = held.get(row.pk, (None, None))
        proposal = row.proposal if isinstance(row.proposal, dict) else {}
        out[row.pk] = shown(
            details,
            checked,
            arguments=shown_arguments(proposal.get("arguments")),
            observations={i: r for (run, i), r in found.items() if run == row.run_id},
            grants=grants,
        )
    return Provenances(out, found)


def confirmation_provenance(
    confirmation: Any, *, recorded: RecordedProvenance, observations: Observations
) -> dict[str, Any]:
    """The API's ``provenance`` of one confirmation row (``pk``, ``run_id``, ``proposal``): where
    each argument came from as the runtime recorded it, and the observations the proposal cites
    with their trust labels (``cited``). ``recorded`` and ``observations`` are the runs side's
    reads (``runs.selectors.recorded_provenance``, ``cited_observations``), handed down by the
    API."""
    found = confirmations_provenance([confirmation], recorded=recorded, observations=observations)
    run_id = confirmation.run_id
    cited = [
        {
            "observation_id": i,
            "trust": found.observations.get((run_id, i), {}).get("trust", "missing"),
        }
        for i in cited_ids(confirmation.proposal)
    ]
    return {**found.of(confirmation.pk).as_dict(), "cited": cited}


def _proposal_id(proposal: Any) -> str | None:
    pid = proposal.get("proposal_id") if isinstance(proposal, dict) else None
    return pid if isinstance(pid, str) else None


def _capabilities(grant_ids: set[str]) -> dict[str, str]:
    if not grant_ids:
        return {}
    rows = Grant.objects.filter(id__in=sorted(grant_ids)).values_list("id", "capability")
    return dict(rows)
