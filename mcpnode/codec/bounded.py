"""Numbers from files, parsed with bounds, and BoundError, the error every bounded codec raises
(CPU lists and masks: codec/cpus.py).

A file can hold anything. Python's `int()` turns 4,300 digits into a ValueError of its own and
fewer into numbers no kernel answers. Here a decimal is at most `max_digits` digits.
"""

from __future__ import annotations

import re

__all__ = [
    "BoundError",
    "parse_decimal",
]

_DECIMAL = re.compile(r"-?[0-9]+\Z", re.ASCII)


class BoundError(ValueError):
    """Text that is not the format asked for, or is past a bound; the message says which."""


def _clip(text: str, limit: int = 60) -> str:
    t = text.strip()
    return repr(t if len(t) <= limit else t[:limit] + "…")


def parse_decimal(
    text: str, *, max_digits: int = 20, minimum: int | None = None, maximum: int | None = None
) -> int:
    """A decimal integer (optional `-`, ASCII digits, surrounding whitespace allowed), at most
    `max_digits` digits (20: every 64-bit value) and inside [minimum, maximum] when given.
    Raises BoundError."""
    t = text.strip()
    if not _DECIMAL.match(t):
        raise BoundError(f"not an integer: {_clip(text)}")
    if len(t.lstrip("-")) > max_digits:
        raise BoundError(f"integer of {len(t.lstrip('-'))} digits (at most {max_digits})")
    value = int(t)
    if minimum is not None and value < minimum:
        raise BoundError(f"{value} is below {minimum}")
    if maximum is not None and value > maximum:
        raise BoundError(f"{value} is above {maximum}")
    return value
