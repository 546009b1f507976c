#!/usr/bin/env bash
# One web process: daphne (ASGI) serving HTTP, websockets and the static files. Run N of them
# (one per core is a good start) behind a proxy; all share SECRET_KEY, DATABASE_URL and REDIS_URL.
# SIGTERM: daphne stops accepting, closes the websockets (clients reconnect to another process
# and replay from their last sequence) and waits at most WEB_SHUTDOWN_S for open requests.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${AGENTCONSOLE_BIN:-.venv/bin}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$BIN/daphne" -b "${BIND:-127.0.0.1}" -p "${PORT:-8000}" \
    --application-close-timeout "${WEB_SHUTDOWN_S:-10}" "$@" agentconsole.asgi:application
