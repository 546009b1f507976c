"""What a planner may say (SPEC §3; seed §6). What the program says back lives in
``observations`` and ``outcomes``.

A planner output is *data*. ``parse_planner_output`` turns untrusted JSON into an
``ActionProposal`` or ``FinalProposal`` or raises ``ParseError``; nothing here grants anything.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, TypeAdapter, ValidationError

from policy.domain.canonical import canonical, proposal_hash_from_canonical
from policy.domain.errors import CanonicalError, ParseError

MAX_ID_LENGTH = 128
MAX_REASON_LENGTH = 2_000
MAX_ANSWER_LENGTH = 20_000
MAX_ARGUMENTS_BYTES = 64 * 1024
MAX_SOURCE_IDS = 64

_Id = Annotated[str, Field(min_length=1, max_length=MAX_ID_LENGTH, pattern=r"^[A-Za-z0-9_.:\-]+$")]


class _Strict(BaseModel):
    # Unknown fields are an error: a planner that writes "capability": "memory:write" into its
    # output gets a PARSE_ERROR, never an effect.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ActionProposal(_Strict):
    _canonical: str | None = PrivateAttr(default=None)

    kind: Literal["tool"] = "tool"
    proposal_id: _Id
    tool_name: Annotated[str, Field(min_length=1, max_length=MAX_ID_LENGTH)]
    tool_version: Annotated[str, Field(min_length=1, max_length=32)]
    arguments: Any = None
    reason_summary: Annotated[str, Field(max_length=MAX_REASON_LENGTH)] = ""
    source_observation_ids: Annotated[list[_Id], Field(max_length=MAX_SOURCE_IDS)] = []

    def canonical_arguments(self) -> str:
        """The canonical JSON of the arguments, computed once (hash, size and token use it)."""
        # __pydantic_private__ directly: pydantic's __getattr__ for private attributes costs
        # more than the hashing it would save (measured in `make bench`).
        # Never None here: the model declares a private attribute, so pydantic sets the dict.
        private = cast("dict[str, Any]", self.__pydantic_private__)
        text = private.get("_canonical")
        if text is None:
            text = private["_canonical"] = canonical(self.arguments)
        return text

    def hash(self) -> str:
        return proposal_hash_from_canonical(
            self.tool_name, self.tool_version, self.canonical_arguments()
        )


class FinalProposal(_Strict):
    kind: Literal["final"] = "final"
    proposal_id: _Id | None = None
    answer: Annotated[str, Field(min_length=1, max_length=MAX_ANSWER_LENGTH)]
    citation_observation_ids: Annotated[list[_Id], Field(max_length=MAX_SOURCE_IDS)] = []


PlannerOutput = Annotated[ActionProposal | FinalProposal, Field(discriminator="kind")]
_planner_output = TypeAdapter(PlannerOutput)


def parse_planner_output(raw: Any) -> ActionProposal | FinalProposal:
    """Parse untrusted planner output. Raises ``ParseError`` with a stable code."""
    if not isinstance(raw, dict):
        raise ParseError("planner output must be a JSON object", code="PARSE_ERROR")
    if raw.get("kind") not in ("tool", "final"):
        raise ParseError("planner output kind must be 'tool' or 'final'", code="PARSE_ERROR")
    try:
        output = _planner_output.validate_python(raw)
    except ValidationError as exc:
        fields = sorted({".".join(str(p) for p in err["loc"][1:]) for err in exc.errors()})
        raise ParseError("planner output does not match its schema", fields=fields) from exc
    if isinstance(output, ActionProposal):
        try:
            size = len(output.canonical_arguments().encode("utf-8"))
        except CanonicalError as exc:
            raise ParseError(exc.message, code="PARSE_ERROR") from exc
        if size > MAX_ARGUMENTS_BYTES:
            raise ParseError("arguments are too large", code="ARGUMENTS_TOO_LARGE", size=size)
    return output
