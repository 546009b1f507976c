"""The forms of the profile pages: they parse what a browser sends into the data the domain
checks (``runs.domain.profiles.validate_profile``); they decide nothing themselves."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from django import forms

from policy.domain import strict_json
from policy.domain.errors import DomainError
from policy.domain.grants import CONSTRAINT_KINDS
from policy.domain.strict_json import JsonRefused
from runs.domain.budgets import (
    MAX_DEADLINE_S,
    MAX_REPEATED_PROPOSAL_CEILING,
    MAX_STEPS_CEILING,
    MAX_TOKENS_CEILING,
)
from runs.domain.gateway.model_planning import MAX_MODEL_NAME, PLANNER_KIND
from runs.domain.profiles import AUDIENCES, NAME_PATTERN, PLANNER_KINDS
from runs.views.grant_rows import (
    ConstraintRow,
    GrantRow,
    RowInvalid,
    blank_rows,
    place_error,
    rows_from_post,
    rows_from_templates,
    templates_from_rows,
)

_AUDIENCE_LABELS = {"all": "All users", "users": "Named users", "groups": "Groups"}
_JSON_HELP = "JSON. Checked when you save: a bad value is refused and nothing is saved."


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.replace("\n", ",").split(",") if part.strip()]


def _json(text: str, *, what: str, kind: type) -> Any:
    # strict_json: a key twice, NaN, a NUL or a lone surrogate is refused here, before the
    # domain sees the value (PostgreSQL refused the last three only as the row was written: a
    # 500, since planner outputs are stored as the operator wrote them).
    try:
        value = strict_json.loads(text or ("[]" if kind is list else "{}"))
    except JsonRefused as exc:
        raise forms.ValidationError(exc.message) from None  # the page names the field
    if not isinstance(value, kind):
        raise forms.ValidationError(
            f"{what} must be a JSON {kind.__name__.replace('dict', 'object')}"
        )
    return value


class ProfileForm(forms.Form):
    name = forms.RegexField(
        regex=f"^{NAME_PATTERN}$",
        max_length=63,
        help_text="Lower-case letters, digits and '-'; users pick profiles by this name.",
    )
    description = forms.CharField(
        required=False, max_length=500, widget=forms.Textarea(attrs={"rows": 2})
    )
    audience = forms.ChoiceField(
        choices=[(a, _AUDIENCE_LABELS[a]) for a in AUDIENCES],
        label="Who may use it",
    )
    users = forms.CharField(
        required=False, label="Named users", help_text="User names, separated by commas."
    )
    groups = forms.CharField(
        required=False, label="Groups", help_text="Group names, separated by commas."
    )
    planner_kind = forms.ChoiceField(choices=[(k, k) for k in PLANNER_KINDS], label="Planner")
    planner_outputs = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false"}),
        label="Planner outputs",
        help_text="Fixture planner only: its scripted outputs, in order. " + _JSON_HELP,
    )
    planner_endpoint = forms.ChoiceField(
        required=False,
        label="Model endpoint",
        choices=(),
        help_text="Model planner only: a configured endpoint (its URL and key stay in settings).",
    )
    planner_model = forms.CharField(
        required=False,
        max_length=MAX_MODEL_NAME,
        label="Model",
        help_text="Model planner only: empty uses the endpoint's model.",
    )
    tools = forms.MultipleChoiceField(
        widget=forms.CheckboxSelectMultiple, label="Tools allowed", choices=()
    )
    # How the grant templates were edited: as form rows (runs/views/grant_rows.py) or as JSON.
    # The page sends "rows" then, when "Edit as JSON" is ticked, "json": the last one counts.
    # A post without it is a script's or an older page's: JSON if it sends the JSON field.
    grants_mode = forms.ChoiceField(
        choices=[("rows", "Form"), ("json", "JSON")], required=False, widget=forms.RadioSelect
    )
    grant_templates = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false"}),
        label="Grant templates",
        help_text=(
            'A list of {"capability", "resource_scope", "expires_at_step"} with optional '
            '"max_calls" and "constraints"; a scope may name {subject}. ' + _JSON_HELP
        ),
    )
    tool_policy = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
        label="Tool policy",
        help_text=(
            'Per tool of this profile: {"confirmation": always | never | when_untrusted | '
            'outside_constraints, "auto_constraints": {...}, "approvers": ...}. It may only '
            "make the deployment's policy stricter. " + _JSON_HELP
        ),
    )
    max_steps = forms.IntegerField(min_value=1, max_value=MAX_STEPS_CEILING, label="Max steps")
    max_tool_calls = forms.IntegerField(
        min_value=0, max_value=MAX_STEPS_CEILING, label="Max tool calls"
    )
    max_repeated_proposal = forms.IntegerField(
        min_value=1, max_value=MAX_REPEATED_PROPOSAL_CEILING, label="Max repeated proposal"
    )
    deadline_s = forms.IntegerField(
        min_value=1, max_value=MAX_DEADLINE_S, label="Time limit (seconds)"
    )
    max_tokens = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_TOKENS_CEILING,
        label="Max model tokens",
        help_text="Input + output tokens a run's model planner may spend.",
    )
    version = forms.IntegerField(required=False, widget=forms.HiddenInput)

    def __init__(
        self,
        *args: Any,
        tools: Iterable[str] = (),
        endpoints: Iterable[str] = (),
        capabilities: Iterable[str] = (),
        json_tab: bool = False,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        self.fields["tools"].choices = [(t, t) for t in tools]  # type: ignore[attr-defined]
        self.fields["planner_endpoint"].choices = [("", "—")] + [  # type: ignore[attr-defined]
            (e, e) for e in endpoints
        ]
        self.capabilities = list(capabilities)
        self.constraint_kinds = CONSTRAINT_KINDS
        if self.is_bound:
            sent = self.data.get("grants_mode")
            fallback = "json" if "grant_templates" in self.data else "rows"
            self.grants_mode_value = sent if sent in ("rows", "json") else fallback
            self.rows: list[GrantRow] = rows_from_post(self.data)
        else:
            self.grants_mode_value = "json" if json_tab else "rows"
            self.rows = rows_from_templates(_loads_or_empty(self.initial.get("grant_templates")))

    @property
    def grant_rows(self) -> list[GrantRow]:
        """The rows to show: the grants, each with a blank constraint line, and a blank row."""
        return blank_rows(self.rows)

    @property
    def template_row(self) -> GrantRow:
        """What the page's script copies to add a row (a ``<template>``): blank."""
        return GrantRow()

    @property
    def template_constraint(self) -> ConstraintRow:
        """What the page's script copies to add a constraint line: blank, no kind chosen."""
        return ConstraintRow(kind="")

    def place_refusal(self, exc: DomainError) -> None:
        """Show the domain's refusal beside the field it names (its code with it): a grant
        row's field, or a field of the form (``budgets.max_steps: …``, ``name: …``)."""
        if self.grants_mode_value == "rows" and place_error(self.rows, exc):
            return
        found = re.match(r"^(?:budgets\.)?([a-z_]+)\b", exc.message)
        name = found.group(1) if found else ""
        if name in self.fields and name not in ("version", "grants_mode"):
            self.add_error(name, f"{exc.code}: {exc.message}")

    def clean_planner_outputs(self) -> Any:
        return _json(self.cleaned_data["planner_outputs"], what="Planner outputs", kind=list)

    def clean_grant_templates(self) -> Any:
        if self.grants_mode_value == "rows":
            try:
                return templates_from_rows(self.rows)
            except RowInvalid as exc:
                raise forms.ValidationError(exc.message) from None
        return _json(self.cleaned_data["grant_templates"], what="Grant templates", kind=list)

    def clean_tool_policy(self) -> Any:
        return _json(self.cleaned_data["tool_policy"], what="Tool policy", kind=dict)

    def profile_data(self) -> dict[str, Any]:
        """The cleaned form as the profile data the domain validates."""
        d = self.cleaned_data
        return {
            "name": d["name"],
            "description": d["description"],
            "audience": d["audience"],
            "users": _names(d["users"]),
            "groups": _names(d["groups"]),
            "planner": _planner(d),
            "tools": list(d["tools"]),
            "grant_templates": d["grant_templates"],
            "tool_policy": d["tool_policy"],
            "budgets": {
                k: d[k]
                for k in (
                    "max_steps",
                    "max_tool_calls",
                    "max_repeated_proposal",
                    "deadline_s",
                    "max_tokens",
                )
                if d.get(k) is not None  # an empty token budget is the default one
            },
        }


def _loads_or_empty(text: Any) -> Any:
    try:
        return json.loads(text) if isinstance(text, str) else []
    except ValueError:
        return []


def _planner(d: dict[str, Any]) -> dict[str, Any]:
    """The planner the form describes: the fields of the other kind are not part of it."""
    if d["planner_kind"] == PLANNER_KIND:
        out = {"kind": PLANNER_KIND, "endpoint": d["planner_endpoint"]}
        return out | ({"model": d["planner_model"]} if d["planner_model"] else {})
    return {"kind": d["planner_kind"], "outputs": d["planner_outputs"]}


def initial_from(data: dict[str, Any], *, version: int | None = None) -> dict[str, Any]:
    """A stored profile (``runs.start.profiles.profile_form_data``) as the form's initial values."""
    return {
        "name": data["name"],
        "description": data["description"],
        "audience": data["audience"],
        "users": ", ".join(data["users"]),
        "groups": ", ".join(data["groups"]),
        "planner_kind": data["planner"].get("kind", "fixture"),
        "planner_outputs": json.dumps(
            data["planner"].get("outputs", []), indent=2, ensure_ascii=False
        ),
        "planner_endpoint": data["planner"].get("endpoint", ""),
        "planner_model": data["planner"].get("model", ""),
        "tools": data["tools"],
        "grant_templates": json.dumps(data["grant_templates"], indent=2, ensure_ascii=False),
        "tool_policy": json.dumps(data.get("tool_policy") or {}, indent=2, ensure_ascii=False),
        **data["budgets"],
        "version": version,
    }


class StartRunForm(forms.Form):
    profile = forms.ChoiceField(widget=forms.RadioSelect, label="Profile", choices=())
    goal = forms.CharField(
        max_length=4000,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="What the run should do, in your words.",
    )

    def __init__(self, *args: Any, profiles: Iterable[Any] = (), **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        self.fields["profile"].choices = [(str(p.pk), p.name) for p in profiles]  # type: ignore[attr-defined]
