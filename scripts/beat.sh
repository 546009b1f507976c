#!/usr/bin/env bash
# The scheduler (Celery beat): sends the periodic sweep, the memory purge and the notifications'
# pickup of due retries (notify/tasks.py). Run exactly one per deployment (two would only sweep
# twice as often: every sweep step is a compare-and-set). It holds no run and no lease; SIGTERM
# stops it at once. BEAT_SCHEDULE: where it remembers the
# last run of each entry (a local file).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${AGENTCONSOLE_BIN:-.venv/bin}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$BIN/celery" -A agentconsole beat -l "${LOG_LEVEL:-info}" \
    -s "${BEAT_SCHEDULE:-var/celerybeat-schedule}" "$@"
