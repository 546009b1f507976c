"""Built-in tools. Each module exposes ``contract()`` returning a ``ToolContract``."""
