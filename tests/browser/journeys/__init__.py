"""Browser tests of the roles' paths on the live stack: starting a run and watching it, a run's
outcome and its trace's verification, a reviewer's handoff, a user's preferences, an operator's
grants and MCP tools. One of the browser folder's units (tests/support/session/parallel.py)."""
