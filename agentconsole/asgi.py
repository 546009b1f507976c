"""ASGI entry point: HTTP through Django, websockets through Channels."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentconsole.settings")

# Set up Django (app registry) before importing anything that may import models.
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402

from agentconsole.access.demo_passwords import refuse_demo_passwords  # noqa: E402
from agentconsole.access.ws_auth import TokenOrSessionAuth  # noqa: E402
from agentconsole.ops.admission import Admission  # noqa: E402
from agentconsole.routing import websocket_urlpatterns  # noqa: E402

# Any ASGI server (daphne, uvicorn...) that loads the application refuses to serve with DEBUG=0
# while a demo password works: the error ends the server's start-up
# (agentconsole/access/demo_passwords.py).
refuse_demo_passwords("the web process (ASGI)")

application = ProtocolTypeRouter(
    {
        # A burst of requests waits on the event loop, not in a thread each (admission.py).
        "http": Admission(
            django_asgi_app, limit=settings.WEB_MAX_REQUESTS, wait_s=settings.WEB_QUEUE_TIMEOUT_S
        ),
        # Session sockets must come from an allowed Origin (no cross-site hijacking); token
        # sockets (scripts) need no Origin. See agentconsole/access/ws_auth.py.
        "websocket": TokenOrSessionAuth(URLRouter(websocket_urlpatterns)),
    }
)
