"""WSGI entry point (HTTP only; websockets need the ASGI application)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentconsole.settings")

application = get_wsgi_application()

from agentconsole.access.demo_passwords import refuse_demo_passwords  # noqa: E402 - Django is set up above

# A WSGI server that loads the application refuses to serve with DEBUG=0 while a demo password
# works (agentconsole/access/demo_passwords.py).
refuse_demo_passwords("the web process (WSGI)")
