"""Password hashing in the test processes: production's algorithm, one iteration.

Django's PBKDF2 takes a million iterations, 0.3-0.4 s of CPU per hash or check on a CI core, and
the suite creates and signs in hundreds of people (the demo's users twice per demo test, a user
per socket test): two minutes of CPU on PBKDF2 alone before this, measured per file by wrapping
the hasher. So every test process hashes with ``OneIterationPBKDF2``: the same algorithm name
and format (``pbkdf2_sha256$1$<salt>$<hash>``), so a server a test starts as its own process,
with production's settings, checks these hashes as it would any (the iteration count is read
from the hash) and upgrades one on a successful sign-in, as Django does. Hashes such a process
made are checked here too (this class reads the count from the hash as well).

One rule for the whole suite (``tests/conftest.py``), not a setting per folder.
"""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class OneIterationPBKDF2(PBKDF2PasswordHasher):
    iterations = 1


HASHERS = [f"{__name__}.{OneIterationPBKDF2.__qualname__}"]
