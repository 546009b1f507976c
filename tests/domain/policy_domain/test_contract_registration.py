"""A contract that would let unknown input through, or whose schemas are not JSON Schema, is
refused when it is registered (issue 9 item 15): a mutation that drops one of these checks
must break a test."""

from __future__ import annotations

from typing import Any

import pytest

from policy.domain.contracts import open_objects
from policy.domain.errors import RegistryError
from policy.domain.registry import ToolRegistry
from tests.plugins import broken_contracts as broken

REFUSED = [
    ("missing_additional_properties", "additionalProperties: false"),
    ("additional_properties_true", "additionalProperties: false"),
    ("invalid_input_schema", "invalid JSON Schema"),
    ("invalid_output_schema", "invalid JSON Schema"),
    ("open_nested_object", r"unknown fields at \$\.filter"),
    ("open_object_in_array", r"unknown fields at \$\.rows\[\]"),
    ("resource_field_not_an_input", "resource field 'path' is not an input"),
    ("malformed_properties", "invalid JSON Schema"),
]


@pytest.mark.parametrize(("factory", "message"), REFUSED)
def test_registry_refuses_a_broken_contract(factory, message):
    """issue 9 item 15: each defect is a RegistryError naming it, before any call is made."""
    with pytest.raises(RegistryError, match=message):
        ToolRegistry([getattr(broken, factory)()])


def test_the_same_contract_without_its_defect_registers():
    assert len(ToolRegistry([broken.good()])) == 1


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        ({"type": "object", "additionalProperties": False}, []),
        ({"type": "object"}, ["$"]),
        ({"properties": {"a": {}}}, ["$"]),
        ({"type": ["object", "null"], "additionalProperties": {}}, ["$"]),
        # A map: the schema of its values is said, so no key goes unchecked.
        ({"type": "object", "additionalProperties": {"type": "string"}}, []),
        ({"type": "object", "additionalProperties": {"type": "object"}},
         ["$.additionalProperties"]),
        ({"type": "array", "items": {"type": "object"}}, ["$[]"]),
        ({"type": "array", "prefixItems": [{"type": "object"}]}, ["$.prefixItems[0]"]),
        ({"anyOf": [{"type": "string"}, {"required": ["a"]}]}, ["$.anyOf[1]"]),
        ({"$defs": {"row": {"type": "object"}}}, ["$.$defs.row"]),
        ({"type": "object", "additionalProperties": False,
          "properties": {"a": {"type": "object", "additionalProperties": False,
                               "properties": {"b": {"type": "object"}}}}}, ["$.a.b"]),
        # Values without a type are "any JSON" on purpose; a `not` admits nothing by itself.
        ({"type": "object", "additionalProperties": False, "properties": {"a": {}}}, []),
        ({"not": {"type": "object"}}, []),
        # Malformed keywords are left to check_schema (a RegistryError, not a crash).
        ({"type": "object", "additionalProperties": False, "properties": ["a"]}, []),
        ({"allOf": {"type": "object"}}, []),
    ],
)  # fmt: skip
def test_open_objects_are_found_at_every_depth(schema: Any, where: list[str]):
    assert open_objects(schema) == where
