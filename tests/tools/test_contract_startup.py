"""A broken contract named in AGENTCONSOLE_TOOLS stops the start-up (issue 9 item 15)."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from agentconsole import wiring
from tests.domain.policy_domain.test_contract_registration import REFUSED


@pytest.fixture
def tools_setting(settings):
    wiring.registry.cache_clear()

    def use(factory: str):
        settings.AGENTCONSOLE_TOOLS = [f"tests.plugins.broken_contracts.{factory}"]

    yield use
    wiring.registry.cache_clear()


@pytest.mark.parametrize(("factory", "message"), REFUSED)
def test_broken_contract_makes_the_registry_improperly_configured(tools_setting, factory, message):
    """issue 9 item 15: the registry the worker and the API build refuses to start."""
    tools_setting(factory)
    with pytest.raises(ImproperlyConfigured, match=message):
        wiring.registry()


@pytest.mark.django_db  # the registry reads the MCP catalog's stamp
def test_the_fixed_contract_starts(tools_setting):
    tools_setting("good")
    assert "broken" in {c.name for c in wiring.registry()}
