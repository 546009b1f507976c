"""Tool registry keyed by (name, version), with input/output validators compiled once."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import jsonschema_rs
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from policy.domain.contracts import ToolContract
from policy.domain.errors import RegistryError
from policy.domain.schemas import compile_verdict, first_error, uses_pattern


@dataclass(frozen=True)
class SchemaViolation:
    code: str
    message: str
    field: str


# jsonschema validator keyword -> our stable code (seed §3 / §15 vocabulary).
_KEYWORD_CODES = {
    "additionalProperties": "UNKNOWN_INPUT_FIELD",
    "unevaluatedProperties": "UNKNOWN_INPUT_FIELD",
    "required": "MISSING_INPUT_FIELD",
    "maxLength": "INPUT_TOO_LONG",
    "maxItems": "INPUT_TOO_LONG",
    "maxProperties": "INPUT_TOO_LONG",
    "minLength": "INPUT_TOO_SHORT",
    "type": "INVALID_INPUT_TYPE",
    "enum": "INVALID_INPUT_VALUE",
    "const": "INVALID_INPUT_VALUE",
    "pattern": "INVALID_INPUT_VALUE",
    "maximum": "INVALID_INPUT_VALUE",
    "minimum": "INVALID_INPUT_VALUE",
}


class RegisteredTool:
    """A contract plus its compiled validators (compiled once, reused by every decision)."""

    __slots__ = ("_both", "_input", "_output", "_verdict", "contract")

    def __init__(self, contract: ToolContract) -> None:
        try:
            Draft202012Validator.check_schema(contract.input_schema)
            Draft202012Validator.check_schema(contract.output_schema)
        except SchemaError as exc:
            raise RegistryError(f"{contract.name}: invalid JSON Schema: {exc.message}") from exc
        self.contract = contract
        self._input = Draft202012Validator(contract.input_schema)
        self._output = Draft202012Validator(contract.output_schema)
        try:
            self._verdict = compile_verdict(contract.input_schema)
        except (ValueError, jsonschema_rs.ReferencingError) as exc:
            # e.g. a pattern that is Python regex but not ECMA-262, as JSON Schema requires.
            raise RegistryError(f"{contract.name}: invalid JSON Schema: {exc}") from exc
        # ``pattern`` is where the two validators' regex dialects differ: ask both (schemas.py).
        self._both = uses_pattern(contract.input_schema)

    def input_violation(self, arguments: Any) -> SchemaViolation | None:
        if not isinstance(arguments, dict):
            return SchemaViolation("INPUT_NOT_OBJECT", "arguments must be a JSON object", "")
        if self._verdict.is_valid(arguments) and (
            not self._both or self._input.is_valid(arguments)
        ):
            return None
        violation = _first_violation(self._input, arguments)
        if violation is None:
            # Only jsonschema_rs refused: an ECMA-262 pattern that Python's ``re`` matches.
            keyword, field = first_error(self._verdict, arguments) or ("pattern", "")
            code = _KEYWORD_CODES.get(keyword, "SCHEMA_INVALID")
            violation = SchemaViolation(code, f"input fails '{keyword}' at '{field or '$'}'", field)
        return violation

    def output_violation(self, value: Any) -> SchemaViolation | None:
        return _first_violation(self._output, value)


def _first_violation(validator: Draft202012Validator, value: Any) -> SchemaViolation | None:
    # The most relevant error first; sorting by path keeps the chosen code deterministic.
    errors = sorted(
        validator.iter_errors(value), key=lambda e: (list(map(str, e.path)), e.validator)
    )
    if not errors:
        return None
    err = errors[0]
    code = _KEYWORD_CODES.get(str(err.validator), "SCHEMA_INVALID")
    if err.validator == "type" and not err.path:
        code = "INPUT_NOT_OBJECT"
    field = ".".join(str(p) for p in err.path)
    if err.validator == "additionalProperties":
        extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
        field = ",".join(extra)
    # The message names the field and rule only; it never echoes the (untrusted) value.
    return SchemaViolation(code, f"input fails '{err.validator}' at '{field or '$'}'", field)


class ToolRegistry:
    def __init__(self, contracts: Iterable[ToolContract] = ()) -> None:
        self._tools: dict[tuple[str, str], RegisteredTool] = {}
        for contract in contracts:
            self.register(contract)

    def register(self, contract: ToolContract) -> None:
        if contract.key in self._tools:
            raise RegistryError(f"tool {contract.name}@{contract.version} is registered twice")
        self._tools[contract.key] = RegisteredTool(contract)

    def get(self, name: str, version: str) -> RegisteredTool | None:
        return self._tools.get((name, version))

    def contract(self, name: str, version: str) -> ToolContract | None:
        """The contract of (name, version), or None when no such tool is registered."""
        tool = self._tools.get((name, version))
        return tool.contract if tool is not None else None

    def __iter__(self) -> Iterator[ToolContract]:
        return (tool.contract for tool in self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)
