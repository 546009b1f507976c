#!/usr/bin/env bash
# One worker process (Celery, prefork pool of WORKER_CONCURRENCY processes). Run M of them, on as
# many hosts as you like, each host with its own hostname. Extra arguments go to `celery worker`
# (scripts/run.sh adds -B: the embedded deployment's one beat inside its one worker).
#
# SIGTERM (to the worker or to its whole process group, as systemd and container runtimes send
# it): REMAP_SIGTERM=SIGQUIT makes the pool processes ignore it and the main process run Celery's
# soft shutdown: take no new task, let the current ones finish for up to
# AGENTCONSOLE_WORKER_SHUTDOWN_S (10 s), then stop them (their messages go back to the broker),
# stop the pool, remove the heartbeat and release the leases of its processes. Without the remap
# the group's SIGTERM killed the pool processes under the main one, which then hung in its warm
# shutdown until something killed it. Give the supervisor a stop timeout above the bound
# (e.g. 30 s) before it sends SIGKILL.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${AGENTCONSOLE_BIN:-.venv/bin}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export REMAP_SIGTERM=SIGQUIT
exec "$BIN/celery" -A agentconsole worker -l "${LOG_LEVEL:-info}" --pool prefork \
    --concurrency "${WORKER_CONCURRENCY:-2}" -n "${WORKER_NAME:-worker.$$@%h}" "$@"
