"""Running the project in production: what an operator of the deployment watches and relies on.

What belongs here: readiness and liveness (health.py: /readyz, /healthz), the Prometheus
exposition (metrics.py: /metrics), each worker's heartbeat (heartbeat.py) and what a worker does
when it starts and stops (worker_lifecycle.py, connected by celery_signals.py), JSON logs
with run and trace ids (logs.py), the OpenTelemetry adapter of runs' telemetry port
(telemetry.py) and the admission of HTTP requests into Django (admission.py). They read the apps'
records and may import anything below them; no app imports them.
"""
