"""The console's front door: sign-in (throttled like the API's), sign-out, and the landing page
of each role (operators on the confirmation queue, reviewers on the handoff inbox, users on their
runs)."""

from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from agentconsole import auth
from policy.pages import role_required, signed_in
from policy.roles import is_operator, is_reviewer


class LoginView(auth_views.LoginView):
    """Django's login; refused while the account or the address is throttled (the same counts
    as the API's token endpoint and the admin's login: agentconsole/auth.py)."""

    template_name = "registration/login.html"
    redirect_authenticated_user = True

    def post(self, request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
        wait = auth.login_throttle().wait(
            auth.username_of(request.POST), auth.client_address(request)
        )
        if wait:
            response = render(
                request,
                "console/error.html",
                {
                    "code": "LOGIN_THROTTLED",
                    "message": f"Too many failed sign-ins for this account or from this "
                    f"address. Try again in {wait} seconds.",
                    "status": 429,
                },
                status=429,
            )
            response["Retry-After"] = str(wait)
            return response
        return super().post(request, *args, **kwargs)


@role_required(signed_in)
def home(request: HttpRequest) -> HttpResponse:
    """Each role lands on its work."""
    if is_operator(request.user):
        return redirect("/confirmations/")
    if is_reviewer(request.user):
        return redirect("/handoffs/")
    return redirect("/runs/")
