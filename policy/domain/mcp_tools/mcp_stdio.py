"""Which stdio MCP servers a deployment lets its processes start (issue 21 item 13), the pure part.

A stdio server is a program the web process (listing) and the workers (calls) run. The
deployment's allowlist, ``AGENTCONSOLE_MCP_STDIO_COMMANDS``, names **whole command lines**: each
entry is an exact argv, the executable and every argument. It used to name executables only,
so allowing ``/usr/bin/python3`` allowed any script, ``-c`` and all.

1. **Exact argv.** A server's ``[command, *args]`` must equal an entry, item for item: no
   other script, no extra argument, no argument left out (a server's flags can change what it
   exposes).
2. **Executables are compared as written, not resolved.** An entry's executable must be an
   absolute, normalized path (no ``..``, ``.``, ``//``), so ``/usr/bin/../bin/python3`` or a
   symlink elsewhere never equals it. Resolving both sides would *widen* the list: a
   virtualenv's ``bin/python`` is a symlink to the system interpreter, yet runs with other
   packages.
3. **The environment cannot change what runs.** A spec maps environment variables to secrets
   the deployment holds; a variable a dynamic loader, shell or language runtime reads to
   decide which code to load (``LD_PRELOAD``, ``PYTHONPATH``, ``NODE_OPTIONS``, ``PATH``...)
   is refused, whatever secret it would carry.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Sequence
from typing import Any

Argv = tuple[str, ...]

SETTING = "AGENTCONSOLE_MCP_STDIO_COMMANDS"

# Variables that decide which code a process loads: the dynamic loader (LD_, DYLD_), shells
# (BASH_ENV, ENV, SHELLOPTS, PS4, IFS), language runtimes and package managers (PYTHON*,
# NODE_*, NPM_, PERL*, RUBY*, GEM_, JAVA_/JDK_, CLASSPATH, UV_, PIP_), glibc (GCONV_PATH,
# GLIBC_TUNABLES, MALLOC_), and where programs and configuration are found (PATH, HOME,
# XDG_CONFIG_*, GIT_). Upper-cased first: Windows reads names without regard to case.
_LOADER_ENV = re.compile(
    r"^(LD_|DYLD_|PYTHON|NODE_|NPM_|PERL|RUBY|GEM_|BUNDLE_|JAVA_|_JAVA_|JDK_|UV_|PIP_|GIT_"
    r"|GCONV_|GLIBC_|MALLOC_|XDG_CONFIG_|BASH_)"
    r"|^(PATH|HOME|ENV|SHELLOPTS|PS4|IFS|CDPATH|CLASSPATH|OPENSSL_CONF|OPENSSL_MODULES)$"
)


class AllowlistInvalid(ValueError):
    """The deployment's allowlist is malformed (raised at start-up, never at call time)."""


def parse_allowlist(value: Any) -> tuple[Argv, ...]:
    """The allowlist as read from the environment (a JSON list of argv lists), checked.

    An entry that is a string is the old executable-only form: refused with the way out, since
    reading it as ``[executable]`` would silently refuse every server started with a script."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise AllowlistInvalid(f"{SETTING} must be a JSON list of command lines (argv lists)")
    out = []
    for entry in value:
        if isinstance(entry, str):
            raise AllowlistInvalid(
                f"{SETTING}: {entry!r} names an executable alone, which would let an operator "
                "start it with any script or argument. Each entry is now a whole command line, "
                f'a JSON list: [{entry!r}, "/path/to/server.py", "--flag"] (README, MCP tools)'
            )
        if not isinstance(entry, list) or not entry or not all(isinstance(a, str) for a in entry):
            raise AllowlistInvalid(f"{SETTING}: each entry is a non-empty JSON list of strings")
        executable = entry[0]
        if not is_plain_absolute(executable):
            raise AllowlistInvalid(
                f"{SETTING}: {executable!r} must be an absolute, normalized path "
                "(no '..', '.' or '//' in it)"
            )
        out.append(tuple(entry))
    return tuple(out)


def is_plain_absolute(path: str) -> bool:
    return path.startswith("/") and "//" not in path and posixpath.normpath(path) == path


def loader_env(names: Iterable[str]) -> list[str]:
    """The names among ``names`` that would change which code a process loads."""
    return sorted(n for n in names if _LOADER_ENV.match(n.upper()))


def stdio_refusal(
    command: str | None, args: Sequence[str], env_names: Iterable[str], allowed: Iterable[Any]
) -> str | None:
    """Why this stdio server may not be started, or None when the allowlist holds its exact
    argv and its environment changes nothing about what runs."""
    argv = (command or "", *args)
    # A string entry (a settings override in the old form) is no argv: it allows nothing.
    if not any(not isinstance(e, str) and tuple(e) == argv for e in allowed):
        return f"this command line (executable and arguments) is not in {SETTING}"
    refused = loader_env(env_names)
    if refused:
        return f"env_secrets may not set {', '.join(refused)}: it changes which code runs"
    return None
