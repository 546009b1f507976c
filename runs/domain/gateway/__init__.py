"""The pure half of the calls a run waits on outside the worker, which the gateway makes.

The life of such a call, a model's or an MCP tool's (calls), and what goes to an OpenAI-compatible
endpoint and what its answer becomes (model_planning). What belongs here: the rules of those
calls, without I/O; the runner's half of an MCP call is ``runs.domain.tool_waits``.
"""
