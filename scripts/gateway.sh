#!/usr/bin/env bash
# The gateway (issue 22): one asyncio process that sends the model requests runs wait on and hands
# each answered run back to the workers. One is enough for thousands of runs in flight (each
# endpoint's AGENTCONSOLE_MODEL_ENDPOINTS "max_in_flight" bounds its calls, over all gateways);
# run a second on another host for availability. It holds one database connection.
# SIGTERM: stop taking calls, let the ones in flight finish for up to GATEWAY_SHUTDOWN_S (10 s),
# give the rest back to the queue (another gateway sends them at once).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${AGENTCONSOLE_BIN:-.venv/bin}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$BIN/python" manage.py gateway --shutdown-s "${GATEWAY_SHUTDOWN_S:-10}" "$@"
