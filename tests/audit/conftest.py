"""The roots the audit tests build, as fixtures; the builders are in tests/support/
(tests/support/fixtures.py wraps them, tests/README.md lists which gives which)."""

from tests.support.fixtures import audit_root, mini_root, probe_root

__all__ = ["audit_root", "mini_root", "probe_root"]
