"""The project package as an app: it has no models, only the system checks of the deployment."""

from django.apps import AppConfig


class AgentconsoleConfig(AppConfig):
    name = "agentconsole"
    verbose_name = "agentconsole"

    def ready(self) -> None:
        # Importing registers the checks (``@register``); see agentconsole/checks.py.
        from agentconsole import checks  # noqa: F401
