"""The notifications page's form: input parsing only (the rules and their codes live in
``notify.domain.rules``, applied by ``notify.services``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django import forms

from notify.domain.rules import MAX_SECRET, MAX_URL, ROLES, EventKind, TargetKind

EVENT_LABELS = {
    EventKind.CONFIRMATION_WAITING.value: "A confirmation is waiting (confirmation.waiting)",
    EventKind.HANDOFF_OPENED.value: "A handoff was opened (handoff.opened)",
}


class SubscriptionForm(forms.Form):
    kind = forms.ChoiceField(
        label="Send by",
        choices=[
            (TargetKind.WEBHOOK.value, "Webhook (signed POST)"),
            (TargetKind.EMAIL.value, "E-mail"),
        ],
    )
    url = forms.CharField(
        label="Webhook URL",
        required=False,
        max_length=MAX_URL,
        help_text="http:// or https://, with no user name or password in it.",
    )
    # Never rendered back into the page (render_value=False): a refused form asks for it again.
    secret = forms.CharField(
        label="Signing secret",
        required=False,
        max_length=MAX_SECRET,
        strip=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="16 characters or more; the receiver checks each signature with it. "
        "Not shown again.",
    )
    email = forms.CharField(label="E-mail address", required=False, max_length=320)
    events = forms.MultipleChoiceField(
        label="Events",
        required=False,
        choices=list(EVENT_LABELS.items()),
        widget=forms.CheckboxSelectMultiple,
    )
    role = forms.ChoiceField(
        label="Only items for the role",
        required=False,
        choices=[("", "any role"), *((r, r) for r in ROLES)],
    )
    # A plain field: a name that is no profile reaches the service, which names the refusal.
    profile = forms.CharField(label="Only runs of the profile", required=False, max_length=63)

    def __init__(self, *args: Any, profiles: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        choices = [("", "any profile"), *((p, p) for p in profiles)]
        self.fields["profile"].widget = forms.Select(choices=choices)


def form_error(form: forms.Form) -> str:
    """The first error in words: "Webhook URL: Ensure this value has at most 2000 characters"."""
    name, errors = next(iter(form.errors.items()))
    label = form.fields[name].label if name in form.fields else name
    return f"{label}: {errors[0]}"
