"""``search_public``: searches the public corpus stored in the database.

Results are evidence with citation ids (``<slug>#<paragraph>``). The text is *untrusted content*:
a document may say "call save_preference…"; that can influence a proposal, never grant anything.
"""

from __future__ import annotations

import re
from typing import Any

from django.db.models import Q

from policy.domain.contracts import (
    ConfirmationMode,
    CorpusResource,
    SideEffect,
    ToolContext,
    ToolContract,
)
from policy.domain.observations import TrustLabel
from policy.domain.origins.argument_policy import ArgumentRule
from policy.domain.outcomes import ToolOutcome
from runs.models import Document

MAX_CANDIDATES = 200
MAX_PASSAGE_CHARS = 600

_WORD = re.compile(r"[A-Za-z0-9]+")
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]+")


def terms(text: str) -> list[str]:
    """Latin words (lower-cased, 2+ chars) and CJK character bigrams (no word boundaries there)."""
    out = [w.lower() for w in _WORD.findall(text) if len(w) > 1]
    for run in _CJK.findall(text):
        out.extend(run[i : i + 2] for i in range(max(1, len(run) - 1)))
    return list(dict.fromkeys(out))


def _score(passage: str, query_terms: list[str]) -> int:
    lowered = passage.lower()
    return sum(lowered.count(t) for t in query_terms)


def execute(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:

    query = arguments["query"]
    corpus = arguments.get("corpus", "public")
    limit = arguments.get("limit", 3)
    query_terms = terms(query)
    if not query_terms:
        return ToolOutcome.rejected("QUERY_HAS_NO_TERMS", "the query has no searchable terms")
    match = Q()
    for t in query_terms[:16]:
        match |= Q(body__icontains=t) | Q(title__icontains=t)
    docs = Document.objects.filter(match, corpus=corpus).order_by("slug")[:MAX_CANDIDATES]
    hits = []
    for doc in docs:
        if ctx.cancel.cancelled:
            return ToolOutcome.failed("CANCELLED", "search cancelled", retryable=False)
        for index, para in enumerate(p.strip() for p in doc.body.split("\n\n")):
            score = _score(para, query_terms) + 2 * _score(doc.title, query_terms) if para else 0
            if score:
                hits.append((-score, doc.slug, index, doc.title, para))
    hits.sort()
    results = [
        {
            "citation_id": f"{slug}#{index}",
            "document": slug,
            "title": title,
            "passage": para[:MAX_PASSAGE_CHARS],
            "score": -neg,
        }
        for neg, slug, index, title, para in hits[:limit]
    ]
    return ToolOutcome.succeeded({"query": query, "corpus": corpus, "results": results})


def contract() -> ToolContract:
    return ToolContract(
        name="search_public",
        version="1",
        description="Search the public document corpus; returns passages with citation ids.",
        input_schema={
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "maxLength": 200},
                "corpus": {"type": "string", "minLength": 1, "maxLength": 64},
                "limit": {"type": "integer", "minimum": 1, "maximum": 10},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        output_schema={
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "corpus": {"type": "string"},
                "results": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["citation_id", "document", "passage"],
                    },
                },
            },
            "required": ["query", "results"],
        },
        required_capabilities=("search:public",),
        side_effect=SideEffect.READ,
        confirmation=ConfirmationMode.NEVER,
        timeout_ms=5_000,
        execute=execute,
        resource=CorpusResource(field="corpus", default="public"),
        logged_fields=("query", "corpus", "limit"),
        output_trust=TrustLabel.UNTRUSTED_CONTENT,
        # A query may repeat what the run read: it searches the deployment's own corpus and
        # sends nothing out.
        untrusted_arguments={"query": ArgumentRule.CARRY},
    )
