"""Helpers of the web layer, beside ``runs/apis.py``, ``runs/consumers.py`` and ``runs/views/``.

The reads and writes of the console's runs pages, and the guard that closes a socket when the
credential or right that opened it ends. What belongs here: code only HTTP or websocket entry
points call; the console's pages themselves are ``runs/views/``.
"""
