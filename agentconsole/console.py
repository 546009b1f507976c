"""The console's front door: sign-in (throttled like the API's), sign-out, and the landing page
of each role (operators on the confirmation queue, reviewers on the handoff inbox, users on their
runs)."""

from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.decorators import method_decorator

from agentconsole.access import auth
from agentconsole.kernel.pages import role_required, signed_in
from agentconsole.kernel.roles import is_operator, is_reviewer


@method_decorator(auth.sign_in_page, name="dispatch")
class LoginView(auth_views.LoginView):
    """Django's login. Its form calls ``authenticate``, whose backend applies the sign-in
    throttle shared with the API's token view and the admin's login
    (agentconsole/access/auth.py)."""

    template_name = "registration/login.html"
    redirect_authenticated_user = True


@role_required(signed_in)
def home(request: HttpRequest) -> HttpResponse:
    """Each role lands on its work."""
    if is_operator(request.user):
        return redirect("/confirmations/")
    if is_reviewer(request.user):
        return redirect("/handoffs/")
    return redirect("/runs/")
