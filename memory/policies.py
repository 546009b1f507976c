"""The memory key policies of this deployment: memory owns them, built once from settings.

``settings.AGENTCONSOLE_MEMORY_KEYS`` (default ``DEFAULT_KEYS``) names the whitelisted keys, their
value schema, retention and purposes. Tests that change the setting call ``cache_clear()``.
"""

from __future__ import annotations

import functools

from django.conf import settings

from memory.domain.preferences import DEFAULT_KEYS, KeyPolicy, build_policies


@functools.cache
def memory_policies() -> dict[str, KeyPolicy]:
    return build_policies(getattr(settings, "AGENTCONSOLE_MEMORY_KEYS", DEFAULT_KEYS))
