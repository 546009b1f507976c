"""MCP servers and their tools under the gate (issue 12 item 2): the SDK adapter (``client``),
the catalog's writes (``services``) and reads (``selectors``), and the operator API (``apis``).
The pure rules (pins, annotations, schemas, results) are ``policy.domain.mcp_tools.mcp``."""
