"""MCP tools under the gate, the pure parts.

Pins, annotations, schema closing and results (mcp), which entries of a server's ``tools/list``
an operator is offered (mcp_listing), which stdio servers a deployment lets start (mcp_stdio).
What belongs here: MCP rules without I/O; the SDK client is ``policy.mcp``.
"""
