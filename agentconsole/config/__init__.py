"""What settings.py reads and how: the environment's values turned into Django settings.

What belongs here: the parsers of environment values (env.py: numbers, durations, JSON and
secrets from files), the settings of notifications and e-mail (notify_env.py) and of
OpenTelemetry (otel_env.py), and the Content-Security-Policy (csp_policy.py). Plain functions and
constants, read once at start-up by agentconsole/settings.py, before Django is set up: nothing
here imports Django or an app's Django side (env.py reads MCP server specs with policy.domain's
plain parsers).
"""
