#!/usr/bin/env bash
# One web process: daphne (ASGI) serving HTTP, websockets and the static files. Run N of them
# (one per core is a good start) behind a proxy; all share SECRET_KEY, DATABASE_URL and REDIS_URL.
# SIGTERM: daphne stops accepting, closes the websockets (clients reconnect to another process
# and replay from their last sequence) and waits at most WEB_SHUTDOWN_S for open requests.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${AGENTCONSOLE_BIN:-.venv/bin}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# The listen backlog (WEB_BACKLOG, default 4096; the kernel caps it at net.core.somaxconn): daphne's
# default of 50 reset connections of a burst before they were accepted (issue 22 item 5: 44 of
# 200 simultaneous creates). Twisted's endpoint string takes it; a colon in BIND (IPv6) is escaped.
BIND="${BIND:-127.0.0.1}"
exec "$BIN/daphne" -e "tcp:port=${PORT:-8000}:interface=${BIND//:/\\:}:backlog=${WEB_BACKLOG:-4096}" \
    --application-close-timeout "${WEB_SHUTDOWN_S:-10}" "$@" agentconsole.asgi:application
