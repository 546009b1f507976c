"""Grant constraints hold on the value the tool will use (issue 9 item 1).

The gate normalizes the resource field (the path, the defaulted corpus) *before* authorization,
checks scope and constraints on those arguments and puts exactly them into the command. The
property test below asks the real artifact tool where it would write, and checks that "the
constraint holds" is the same statement as "the file lands under the granted prefix".
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from policy.domain.canonical import arguments_hash
from policy.domain.contracts import CancelSignal, ToolContext
from policy.domain.decisions import Execute, Reject
from policy.domain.gate import evaluate
from policy.domain.grants import Constraint, url_host
from policy.domain.origins.provenance import ArgumentProvenance
from policy.domain.proposals import ActionProposal, parse_planner_output
from policy.domain.registry import ToolRegistry
from runs.tools import artifacts, search
from tests.domain.toolkit import RUN_ID, SUBJECT, Toolkit, grant, run_view, tool

NOW = 1_000_000
RUN = run_view(NOW + 60_000)
REGISTRY = ToolRegistry([artifacts.contract(), search.contract(), Toolkit().kv_contract()])
REPORTS = "run-output/reports/"


def decide(name: str, arguments: Any, grants: list[Any]):
    prop = parse_planner_output(tool("p1", name, arguments))
    assert isinstance(prop, ActionProposal)
    return evaluate(
        prop,
        run=RUN,
        grants=grants,
        confirmations=(),
        registry=REGISTRY,
        now_ms=NOW,
        # Nothing the run read: these calls are about constraints, not provenance.
        provenance=ArgumentProvenance(()),
    )


def write(path: str, constraint: Constraint | None = None, scope: str = "*"):
    constraints = {"path": constraint or Constraint(prefix=REPORTS)}
    g = grant("artifact:write", scope, constraints=constraints)
    return decide("write_artifact", {"path": path, "content": "x"}, [g])


def assert_violated(decision: Any) -> None:
    assert isinstance(decision, Reject), decision
    assert (decision.layer, decision.code) == ("authorization", "CAPABILITY_CONSTRAINT_VIOLATED")


# ---- the reported instance and whole-segment prefixes --------------------------------------------


def test_dot_dot_cannot_climb_out_of_a_prefix_constraint():
    """issue 9 item 1: run-output/reports/../other.txt passed prefix run-output/reports/ and
    the tool wrote run-output/other.txt."""
    assert_violated(write("run-output/reports/../other.txt"))


@pytest.mark.parametrize(
    ("path", "normalized"),
    [
        ("run-output/reports/a.md", "run-output/reports/a.md"),
        ("run-output/reports", "run-output/reports"),
        ("run-output//reports/./a.md", "run-output/reports/a.md"),
        ("run-output/x/../reports/a.md", "run-output/reports/a.md"),
        ("./run-output/reports/b/../a.md", "run-output/reports/a.md"),
    ],
)
def test_prefix_holds_on_the_normalized_path_the_tool_receives(path, normalized):
    decision = write(path)
    assert isinstance(decision, Execute), decision
    assert decision.command.validated_arguments["path"] == normalized
    assert decision.command.resource == normalized
    assert decision.command.arguments_hash == arguments_hash(decision.command.validated_arguments)


@pytest.mark.parametrize(
    "path",
    ["run-output/reports-old/x.md", "run-output/reportsx", "run-output/other.txt", "run-output/r"],
)
def test_prefix_on_a_path_matches_whole_segments(path):
    assert_violated(write(path))
    # The same with a prefix written without its trailing slash.
    assert_violated(write(path, Constraint(prefix="run-output/reports")))


def test_plain_string_prefix_is_unchanged_off_the_path_field():
    """A prefix on a field that is not the contract's path keeps plain string semantics."""
    g = grant("kv:write", constraints={"key": Constraint(prefix="user/")})
    assert isinstance(decide("kv_put", {"key": "user/a", "value": 1}, [g]), Execute)
    assert_violated(decide("kv_put", {"key": "users/a", "value": 1}, [g]))


_segments = st.sampled_from(["run-output", "reports", "reports-old", "..", ".", "", "a.md", "x"])


@settings(max_examples=400, deadline=None)
@given(parts=st.lists(_segments, min_size=1, max_size=7), lead=st.sampled_from(["", "./"]))
def test_constraint_holds_iff_the_tool_writes_under_the_prefix(tmp_path_factory, parts, lead):
    """issue 9 item 1 (property): for paths with '..', '.', '//' segments, the prefix constraint
    allows the call exactly when the file the artifact tool writes is under run-output/reports."""
    path = lead + "/".join(parts)
    decision = write(path)
    if isinstance(decision, Reject) and decision.layer in ("schema", "semantic"):
        return  # refused before authorization (outside the root, empty): nothing is written
    root = tmp_path_factory.getbasetemp() / "out"
    ctx = ToolContext(
        run_id=RUN_ID,
        subject=SUBJECT,
        step=2,
        idempotency_token="t",
        deadline_ms=0,
        cancel=CancelSignal(),
        services={"run_output_root": str(root)},
    )
    # Where the tool would write for the arguments it would be given (or, if refused, for the
    # normalized path: what a check on the raw value would have let through).
    given_path = (
        decision.command.validated_arguments["path"]
        if isinstance(decision, Execute)
        else posixpath.normpath(path)
    )
    target = artifacts.target_path(ctx, given_path)
    reports = (Path(root) / RUN_ID / "reports").resolve()
    under = target == reports or reports in target.parents
    assert isinstance(decision, Execute) is under, (path, decision)


# ---- other places where a checked value and a used value could differ ----------------------------


def test_corpus_default_is_what_the_scope_was_checked_on_and_what_the_tool_gets():
    """The corpus grant covered "public" (the rule's default) while the tool had its own default:
    now the command carries the corpus explicitly."""
    g = grant("search:public", "public", constraints={"corpus": Constraint(equals="public")})
    decision = decide("search_public", {"query": "retry"}, [g])
    assert isinstance(decision, Execute), decision
    assert decision.command.validated_arguments == {"query": "retry", "corpus": "public"}
    other = decide("search_public", {"query": "retry", "corpus": "internal"}, [g])
    assert isinstance(other, Reject)
    assert other.code == "CAPABILITY_SCOPE_MISMATCH"


def test_integer_field_reaches_the_tool_as_an_integer():
    """2.0 passes "type": "integer"; the tool slices with it, so it must get 2."""
    g = grant("search:public", "public")
    decision = decide("search_public", {"query": "retry", "limit": 2.0}, [g])
    assert isinstance(decision, Execute)
    limit = decision.command.validated_arguments["limit"]
    assert limit == 2
    assert type(limit) is int


def test_unchanged_arguments_keep_the_proposal_arguments_hash():
    g = grant("search:public", "public")
    args = {"query": "retry", "corpus": "public", "limit": 3}
    decision = decide("search_public", args, [g])
    assert isinstance(decision, Execute)
    assert decision.command.arguments_hash == arguments_hash(args)


# ---- the other constraint kinds (SPEC §3) ------------------------------------------------------

KV_CASES = [
    # (constraint, allowed values, refused values)
    (Constraint(subset_of=["a", 1, {"k": True}]), [[], ["a"], [1.0, "a"], [{"k": True}, "a"]],
     [["b"], [True], "a", [{"k": 1}], [["a"]], 1]),
    (Constraint(subset_of=[[1]]), [[[1]], [[1.0], [1]]], [[[True]], [1]]),
    (Constraint(url_host_in=["good.example", "Bücher.example."]),
     ["https://good.example/x", "http://GOOD.example.:8080/p?q", "https://bücher.example/",
      "https://xn--bcher-kva.example", "https://good.example"],
     ["https://good.example@evil.example/", "https://evil.example/?good.example",
      "https://evil.example\\@good.example/", "ftp://good.example/", "//good.example/x",
      "https://good.example.evil.example/", "https://evilgood.example/", "good.example:443/",
      "https://user:pw@good.example/", "https://good.example:99999/", " https://good.example/",
      "https://good.example/\n", 1, ["https://good.example/"]]),
    # issue 21 item 15: without a scheme, the host an address bar would read.
    (Constraint(url_host_in=["www.example.com"]),
     ["www.example.com/page", "www.example.com", "WWW.example.com./a?b#c"],
     ["evil.example/www.example.com", "evil.example?www.example.com", "//www.example.com/",
      "www.example.com@evil.example", "www.example.com:8080/page", "http:www.example.com"]),
]  # fmt: skip


@pytest.mark.parametrize(("constraint", "allowed", "refused"), KV_CASES)
def test_subset_of_and_url_host_in(constraint, allowed, refused):
    """issue 9 item 1: the constraint kinds SPEC §3 lists, compared by JSON type."""
    g = grant("kv:write", constraints={"value": constraint})
    for value in allowed:
        decision = decide("kv_put", {"key": "k", "value": value}, [g])
        assert isinstance(decision, Execute), (constraint, value, decision)
    for value in refused:
        assert_violated(decide("kv_put", {"key": "k", "value": value}, [g]))


def test_absent_or():
    g = grant(
        "search:public",
        "public",
        constraints={"limit": Constraint(absent_or=Constraint(maximum=3))},
    )
    assert isinstance(decide("search_public", {"query": "q"}, [g]), Execute)
    assert isinstance(decide("search_public", {"query": "q", "limit": 3}, [g]), Execute)
    assert_violated(decide("search_public", {"query": "q", "limit": 4}, [g]))
    # Without absent_or an absent argument fails its constraint, as before.
    strict = grant("search:public", "public", constraints={"limit": Constraint(maximum=3)})
    assert_violated(decide("search_public", {"query": "q"}, [strict]))


def test_absent_or_prefix_on_the_path_uses_segments():
    assert_violated(
        write("run-output/reports-old/a", Constraint(absent_or=Constraint(prefix=REPORTS)))
    )
    assert isinstance(
        write("run-output/reports/a", Constraint(absent_or=Constraint(prefix=REPORTS))), Execute
    )


@pytest.mark.parametrize(
    "fields",
    [{}, {"equals": 1, "maximum": 2}, {"subset_of": [1], "one_of": [1]}, {"url_host_in": ["a@b"]},
     {"url_host_in": [""]}, {"absent_or": {}}],
)  # fmt: skip
def test_a_constraint_names_exactly_one_valid_kind(fields):
    with pytest.raises(ValidationError):
        Constraint.model_validate(fields)


def test_constraints_load_from_json_grant_config():
    c = Constraint.model_validate({"absent_or": {"url_host_in": ["docs.example"]}})
    assert c.allows(False, None)
    assert c.allows(True, "https://docs.example/a")
    assert not c.allows(True, "https://docs.example.evil/a")


@pytest.mark.parametrize(
    ("url", "host"),
    [("https://a.example/", "a.example"), ("HTTPS://A.EXAMPLE./", "a.example"),
     ("https://b\u00fccher.example", "xn--bcher-kva.example"),
     ("https://a.example@b.example", None),
     ("https://a.example\\@b.example", None), ("javascript://a.example", None), ("", None),
     # IDNA 2003 would map these onto ASCII hosts; IDNA 2008 clients reach other hosts.
     ("https://fa\u00df.example", None), ("https://\uff27\uff2f\uff2f\uff24.example", None),
     ("https://a..example", None), ("https://%61.example", None),
     ("https://a.example../", None)],
)  # fmt: skip
def test_url_host_is_parsed_and_normalized(url, host):
    assert url_host(url) == host


# issue 21 item 15: a URL without a scheme is read as a browser's address bar reads it
# (``http://`` in front), and refused wherever parsers could disagree about its host.
SCHEMELESS = [
    ("www.example.com/page", "www.example.com"),
    ("www.example.com", "www.example.com"),
    ("WWW.Example.COM./page?q=1#top", "www.example.com"),
    ("www.example.com?next=@evil.example", "www.example.com"),  # @ in the query, not userinfo
    ("www.example.com#@evil.example", "www.example.com"),
    ("b\u00fccher.example/x", "xn--bcher-kva.example"),
    ("127.0.0.1/status", "127.0.0.1"),
    ("127.1/status", "127.1"),  # never equal to an allowed 127.0.0.1: refused, not widened
    # A path or a protocol-relative reference: its scheme and host come from elsewhere.
    ("//evil.example/x", None),
    ("/www.example.com", None),
    # Userinfo and backslashes: parsers disagree about where the host ends.
    ("evil.example\\@www.example.com", None),
    ("evil.example\\www.example.com", None),
    ("www.example.com@evil.example", None),
    ("user:pass@www.example.com", None),
    ("www.example.com%40evil.example", None),
    # A scheme without "//" (a browser reads http://evil.example, Python no host at all).
    ("http:evil.example", None),
    ("https:/evil.example", None),
    ("https:///evil.example", None),
    ("javascript:alert(1)", None),
    # host:port without a scheme is a scheme to a URL parser ("www.example.com:"): refused.
    ("www.example.com:8080/page", None),
    ("localhost:8080", None),
    ("www.example.com:80@evil.example", None),
    # Dots and letters IDNA would map onto ASCII: another host to an IDNA 2008 client.
    ("www\u3002example.com/x", None),
    ("www\uff0eexample.com", None),
    ("\uff57\uff57\uff57.example.com", None),
    ("fa\u00df.example/x", None),
    ("www.example.com../x", None),  # one trailing dot is the root; two are an empty label
    ("[::1]/x", None),
    (" www.example.com", None),
    ("www.example.com\t", None),
    ("www.exa mple.com", None),
]


@pytest.mark.parametrize(("value", "host"), SCHEMELESS)
def test_a_url_without_a_scheme_is_judged_by_the_host_a_browser_reads(value, host):
    assert url_host(value) == host
