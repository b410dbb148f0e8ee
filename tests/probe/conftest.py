"""The roots the probe tests build, as fixtures; the builders are in tests/support/
(tests/support/fixtures.py wraps them, tests/README.md lists which gives which)."""

from tests.support.fixtures import probe_root

__all__ = ["probe_root"]
