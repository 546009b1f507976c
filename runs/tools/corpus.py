"""Loading documents into the corpus ``search_public`` reads."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from runs.models import Document

MAX_DOCUMENT_BYTES = 1024 * 1024


def document_load(*, path: Path, corpus: str = "public") -> tuple[Document, bool]:
    """Upsert one file by (corpus, slug); the slug is the file name without its suffix."""
    data = path.read_bytes()
    if len(data) > MAX_DOCUMENT_BYTES:
        raise ValueError("document is larger than 1 MiB")
    text = data.decode("utf-8")
    slug = re.sub(r"[^a-z0-9-]+", "-", path.stem.lower()).strip("-")
    if not slug:
        raise ValueError("cannot derive a slug from the file name")
    first, _, rest = text.partition("\n")
    title = first.lstrip("# ").strip() if first.startswith("#") else slug
    body = rest.strip() if first.startswith("#") else text.strip()
    return Document.objects.update_or_create(
        corpus=corpus,
        slug=slug,
        defaults={"title": title[:256], "body": body, "sha256": hashlib.sha256(data).hexdigest()},
    )


def demo_corpus_dir() -> Path:
    return Path(__file__).resolve().parents[1] / "fixtures" / "corpus"
