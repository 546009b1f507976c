"""python manage.py load_documents PATH [PATH …] [--corpus NAME] — load text/markdown documents."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runs.tools.corpus import document_load


class Command(BaseCommand):
    help = "Load .md/.txt files (or the files in given folders) into the searchable corpus."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+")
        parser.add_argument("--corpus", default="public")

    def handle(self, *args: Any, **options: Any) -> None:
        files: list[Path] = []
        for raw in options["paths"]:
            path = Path(raw)
            if path.is_dir():
                files.extend(sorted(p for p in path.iterdir() if p.suffix in (".md", ".txt")))
            elif path.is_file():
                files.append(path)
            else:
                raise CommandError(f"DOCUMENT_PATH_NOT_FOUND: {path}")
        for path in files:
            try:
                doc, created = document_load(path=path, corpus=options["corpus"])
            except (UnicodeDecodeError, ValueError) as exc:
                raise CommandError(f"DOCUMENT_INVALID: {path}: {exc}") from None
            self.stdout.write(f"{'created' if created else 'updated'} {doc}")
