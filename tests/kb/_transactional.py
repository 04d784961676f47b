"""Make `transaction=True` tests work with the two-alias setup (imported by the tests that need it).

Both aliases are one database, and the application role rightly may not TRUNCATE: after a
transactional test, flush once through "owner" instead of through every alias.
"""

from __future__ import annotations

from django.test import TransactionTestCase

_original = TransactionTestCase._fixture_teardown


def _fixture_teardown(self) -> None:
    names = set(self._databases_names(include_mirrors=False))
    if {"owner", "default"} <= names:
        cls = type(self)  # _databases_names is a classmethod; pytest-django makes one class per test
        saved = cls.databases
        cls.databases = {"owner"}
        try:
            _original(self)
        finally:
            cls.databases = saved
    else:
        _original(self)


if not getattr(_original, "_grounded_owner_flush", False):
    _fixture_teardown._grounded_owner_flush = True  # type: ignore[attr-defined]
    TransactionTestCase._fixture_teardown = _fixture_teardown
