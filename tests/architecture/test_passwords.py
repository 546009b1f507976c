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


def test_the_browser_consoles_settings_differ_from_productions_only_in_the_hasher() -> None:
    """tests/support/session/server_settings.py: what the browser tests' live console runs
    with. A second difference would make those tests exercise something production is not."""
    from agentconsole import settings as production
    from tests.support.session import passwords, server_settings

    def names(module: object) -> dict[str, object]:
        return {k: getattr(module, k) for k in dir(module) if k.isupper()}

    theirs, ours = names(production), names(server_settings)
    assert set(ours) - set(theirs) == {"PASSWORD_HASHERS"}  # production keeps Django's default
    assert all(ours[k] == theirs[k] for k in theirs)
    assert ours["PASSWORD_HASHERS"] == passwords.HASHERS
