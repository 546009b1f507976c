"""Who may come in, and how long they stay in: the project root's sign-in side.

What belongs here: the throttled sign-in and the API's expiring tokens (auth.py), the services
that create accounts and give roles (accounts.py, used by ``manage.py grant_role``), the refusal
to start while a demo password works (demo_passwords.py), the websocket's sign-in (ws_auth.py)
and the signals that close a socket whose credential ended (ws_revoke.py). They sit above the
apps (the demo users are runs', the socket's close codes runs'), so no app imports them; what an
app needs of a signed-in person (roles, pages' sign-in checks) is in agentconsole/kernel/.
"""
