"""Policy domain core: plain Python (stdlib, pydantic, jsonschema). No Django here."""
