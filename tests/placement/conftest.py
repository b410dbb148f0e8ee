"""The roots the placement tests build, as fixtures; the builders are in tests/support/
(tests/support/fixtures.py wraps them, tests/README.md lists which gives which)."""

from tests.support.fixtures import irq_root, placed_root

__all__ = ["irq_root", "placed_root"]
