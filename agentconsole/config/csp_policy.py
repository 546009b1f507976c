"""The console's Content-Security-Policy (issue 21 item 10), as django-csp's
``CONTENT_SECURITY_POLICY`` setting; ``csp.middleware.CSPMiddleware`` puts it on every answer.

Nothing but the console's own files: no inline script, style or event handler attribute (the
pages' JS and CSS are static files; htmx is told not to inject its indicator <style> nor to eval,
templates/console/base.html), no plugin, no <base>, no framing, forms post to the console only.
``'self'`` in connect-src covers the same-origin ``ws://`` and ``wss://`` of the live pages (CSP
level 3). A page that needs more says so on its own view and nowhere else: /api/docs/ adds a
nonce for Swagger UI's start-up script and data: images (agentconsole/api_urls.py ``ApiDocs``).
"""

from __future__ import annotations

from typing import Any

from csp.constants import NONE, SELF

CONTENT_SECURITY_POLICY: dict[str, Any] = {
    "DIRECTIVES": {
        "default-src": [NONE],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "frame-ancestors": [NONE],
        "form-action": [SELF],
    },
}
