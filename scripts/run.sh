#!/usr/bin/env bash
# Embedded mode in one command: a Celery worker, daphne (web + websockets) and the gateway (model
# calls), stopped together.
set -euo pipefail

cd "$(dirname "$0")/.."
BIN=.venv/bin
# Integrators' tool modules (AGENTCONSOLE_TOOLS) may live in this checkout: make it importable.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PORT="${PORT:-8000}"

# Mirrors settings._env_bool("DEBUG", "1").
debug=0
case "$(printf '%s' "${DEBUG-1}" | tr '[:upper:]' '[:lower:]' | tr -d '[:space:]')" in
    1 | true | yes | on) debug=1 ;;
esac
if ((!debug)); then
    # daphne and celery run no system checks: run the deployment checks here, and refuse to start
    # on an error (e.g. agentconsole.E002, an invalid tool policy). A demo password
    # (agentconsole.E001) also stops each process on its own (agentconsole/access/demo_passwords.py).
    "$BIN/python" manage.py check --deploy --fail-level ERROR
fi

pids=()
# Each process below is the leader of its own process group (job control), so the cleanup can
# stop a whole group, pool processes and tool children included, and nothing outlives this
# script. A SIGTERM sent to this script's group reaches only this script, which forwards exactly
# one SIGTERM to each group: a second one would cut the worker's shutdown bound short.
set -m
cleanup() {
    trap - EXIT INT TERM
    if ((${#pids[@]})); then
        for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
        # The worker lets a running task finish for up to AGENTCONSOLE_WORKER_SHUTDOWN_S (10 s);
        # past the bound plus a margin, force every group.
        for _ in $(seq 1 200); do
            alive=0
            for pid in "${pids[@]}"; do
                kill -0 -- "-$pid" 2>/dev/null && alive=1
            done
            ((alive)) || break
            sleep 0.1
        done
        for pid in "${pids[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
        wait "${pids[@]}" 2>/dev/null || true
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# -B: the periodic sweeper runs inside this one worker (embedded mode has a single worker).
scripts/worker.sh -B -s var/celerybeat-schedule &
pids+=($!)
PORT="$PORT" scripts/web.sh &
pids+=($!)
# The gateway sends the model calls runs wait on (embedded: it polls the SQLite database).
scripts/gateway.sh &
pids+=($!)

echo
echo "agentconsole: http://127.0.0.1:${PORT}/"
if ((debug)) && [[ -s var/demo-logins.txt ]]; then
    echo "demo logins:"
    sed 's/^/  /' var/demo-logins.txt
elif ((debug)); then
    echo "no demo logins: \`python manage.py load_demo\` creates the demo users (development only)"
fi
echo

# Stop everything as soon as either process exits.
wait -n "${pids[@]}"
