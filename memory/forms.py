"""The console's memory forms: input parsing only (rights and rules live in the services).

Values are kept exactly as typed (``strip=False``): the confirmation shows, hashes and writes
the exact value, so nothing may change it silently on the way.
"""

from __future__ import annotations

from typing import Any

from django import forms

from memory.models import MAX_VERSION

HASH = r"^[0-9a-f]{64}$"


class ProposeForm(forms.Form):
    key = forms.CharField(max_length=64)
    value = forms.CharField(max_length=512, strip=False)
    # Empty: the key has no value yet (or a revoked one); otherwise the version the user read.
    expected_version = forms.IntegerField(min_value=0, max_value=MAX_VERSION, required=False)


class ConfirmForm(forms.Form):
    proposal_hash = forms.RegexField(HASH)


class RevokeForm(forms.Form):
    reason = forms.CharField(max_length=256, required=False)
    expected_version = forms.IntegerField(min_value=1, max_value=MAX_VERSION)

    def reason_or_default(self) -> str:
        return self.cleaned_data["reason"] or "revoked by the subject"


class AdminRevokeForm(forms.Form):
    reason = forms.CharField(max_length=256)
    expected_version = forms.IntegerField(min_value=1, max_value=MAX_VERSION)


class EraseForm(forms.Form):
    typed = forms.CharField(max_length=150, required=False, strip=False)


class SearchForm(forms.Form):
    subject = forms.CharField(max_length=128, required=False)
    key = forms.CharField(max_length=64, required=False)
    after_subject = forms.CharField(max_length=128, required=False)
    after_key = forms.CharField(max_length=64, required=False)

    def after(self) -> tuple[str, str] | None:
        data: dict[str, Any] = self.cleaned_data
        if data.get("after_subject"):
            return (data["after_subject"], data.get("after_key") or "")
        return None


def form_errors(form: forms.Form) -> str:
    """The form's errors in words, for the error page: "value: This field is required."."""
    return "; ".join(
        f"{name}: {' '.join(str(e) for e in errors)}" for name, errors in form.errors.items()
    )
