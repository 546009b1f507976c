"""Shared pytest fixtures for the agentconsole test suite (none yet).

Layout mirrors the code: tests/domain (no database), tests/conformance, tests/services, tests/api,
tests/realtime, tests/workers, tests/faults, tests/e2e, tests/architecture.
"""
