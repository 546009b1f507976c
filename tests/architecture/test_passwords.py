"""The test processes hash passwords with production's algorithm at one iteration
(tests/support/session/passwords.py): fast here, and a hash either side made is checked by the
other."""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher, check_password, make_password


def test_a_test_hash_is_production_pbkdf2_at_one_iteration() -> None:
    encoded = make_password("s3cret-enough")
    algorithm, iterations, _salt, _hash = encoded.split("$")
    assert (algorithm, iterations) == (PBKDF2PasswordHasher.algorithm, "1")
    # What a server started with production's settings does with it: reads the count from
    # the hash and accepts the right password only.
    production = PBKDF2PasswordHasher()
    assert production.verify("s3cret-enough", encoded)
    assert not production.verify("s3cret-enougH", encoded)
    assert production.must_update(encoded)  # and upgrades it on that sign-in


def test_a_hash_made_with_production_iterations_is_checked_here() -> None:
    encoded = PBKDF2PasswordHasher().encode("s3cret-enough", "salt" * 4, iterations=1000)
    assert check_password("s3cret-enough", encoded)
    assert not check_password("another", encoded)
