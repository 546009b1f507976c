"""``write_artifact``: writes a file under the run-output root, and nowhere else.

* The contract's ``PathResource`` normalizes the path; ``..``, absolute paths and backslashes are
  rejected at the semantic layer, before any tool code runs.
* Idempotent by token: the ``Artifact`` row is keyed by the idempotency token, so a retried or
  recovered call writes the same bytes to the same place and records nothing twice.
* ``verify`` re-reads the file and compares its hash with the hash of the requested content
  (seed experiment 3: a 2xx is not a business success).
* ``reconcile`` answers from the row and the file whether the effect happened.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

from policy.domain.contracts import (
    ConfirmationMode,
    PathResource,
    SideEffect,
    ToolContext,
    ToolContract,
)
from policy.domain.origins.argument_policy import ArgumentRule
from policy.domain.outcomes import ToolOutcome, Verification
from runs.models import Artifact

ROOT = "run-output"
RESOURCE = PathResource(field="path", root=ROOT)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def target_path(ctx: ToolContext, relative: str) -> Path:
    """The file for ``run-output/<rest>`` of this run, inside the configured output root."""
    root = Path(ctx.services["run_output_root"]).resolve()
    normalized = RESOURCE.derive({"path": relative}, None)  # type: ignore[arg-type]
    rest = normalized[len(ROOT) + 1 :]
    path = (root / ctx.run_id / rest).resolve()
    # Defence in depth: the gate already refused escapes; a symlink must not reopen them.
    if root / ctx.run_id not in path.parents:
        raise ValueError("artifact path escapes the run-output root")
    return path


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def execute(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    data = arguments["content"].encode("utf-8")
    path = target_path(ctx, arguments["path"])
    digest = _sha(data)
    existing = Artifact.objects.filter(idempotency_token=ctx.idempotency_token).first()
    if existing is not None and existing.sha256 == digest:
        return ToolOutcome.succeeded(_value(arguments["path"], existing.sha256, existing.size))
    if ctx.cancel.cancelled:
        return ToolOutcome.failed("CANCELLED", "cancelled before writing", retryable=False)
    _write_atomically(path, data)
    Artifact.objects.get_or_create(
        idempotency_token=ctx.idempotency_token,
        defaults={
            "run_id": ctx.run_id,
            "path": arguments["path"],
            "sha256": digest,
            "size": len(data),
        },
    )
    return ToolOutcome.succeeded(_value(arguments["path"], digest, len(data)))


def _value(path: str, digest: str, size: int) -> dict[str, Any]:
    return {"path": path, "sha256": digest, "size": size}


def verify(arguments: dict[str, Any], value: dict[str, Any], ctx: ToolContext) -> Verification:
    expected = _sha(arguments["content"].encode("utf-8"))
    try:
        stored = _sha(target_path(ctx, arguments["path"]).read_bytes())
    except FileNotFoundError:
        return Verification(ok=False, code="ARTIFACT_MISSING")
    if stored != expected or value.get("sha256") != expected:
        return Verification(
            ok=False,
            code="ARTIFACT_HASH_MISMATCH",
            details={"expected": expected, "stored": stored},
        )
    return Verification(ok=True, details={"sha256": stored})


def reconcile(token: str, arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    row = Artifact.objects.filter(idempotency_token=token).first()
    path = target_path(ctx, arguments["path"])
    if row is not None and path.exists() and _sha(path.read_bytes()) == row.sha256:
        return ToolOutcome.succeeded(_value(row.path, row.sha256, row.size))
    if row is None and not path.exists():
        return ToolOutcome.failed("ARTIFACT_NOT_WRITTEN", "no effect found", retryable=True)
    return ToolOutcome.unknown("ARTIFACT_STATE_UNCLEAR", "row and file disagree")


def compensate(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    path = target_path(ctx, arguments["path"])
    path.unlink(missing_ok=True)
    return ToolOutcome.succeeded({"path": arguments["path"], "removed": True})


def contract() -> ToolContract:
    return ToolContract(
        name="write_artifact",
        version="1",
        description="Write a text file under run-output/ for this run.",
        input_schema={
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1, "maxLength": 256},
                "content": {"type": "string", "maxLength": 100_000},
            },
            "required": ["path", "content"],
            "additionalProperties": False,
        },
        output_schema={
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                "size": {"type": "integer", "minimum": 0},
            },
            "required": ["path", "sha256", "size"],
        },
        required_capabilities=("artifact:write",),
        side_effect=SideEffect.IDEMPOTENT_WRITE,
        confirmation=ConfirmationMode.NEVER,
        timeout_ms=5_000,
        execute=execute,
        verify=verify,
        reconcile=reconcile,
        compensate=compensate,
        resource=RESOURCE,
        logged_fields=("path",),
        redacted_fields=("content",),
        # The path steers where the write lands; the content is what a note is for, and may
        # quote what the run read (policy.domain.origins.argument_policy).
        untrusted_arguments={"path": ArgumentRule.CONFIRM, "content": ArgumentRule.CARRY},
        max_input_bytes=110_000,
    )
