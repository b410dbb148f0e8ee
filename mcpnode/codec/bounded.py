"""Numbers from files, parsed with bounds, and BoundError, the error every bounded codec raises
(CPU lists and masks: codec/cpus.py).

A file can hold anything. Python's `int()` turns 4,300 digits into a ValueError of its own and
fewer into numbers no kernel answers. Here a decimal is at most `max_digits` digits.
"""

from __future__ import annotations

__all__ = [
    "BoundError",
    "is_digits",
    "is_hex",
    "parse_decimal",
]

_HEX_DIGITS = "0123456789abcdefABCDEF"


class BoundError(ValueError):
    """Text that is not the format asked for, or is past a bound; the message says which."""


def _clip(text: str, limit: int = 60) -> str:
    t = text.strip()
    return repr(t if len(t) <= limit else t[:limit] + "…")


def is_digits(text: str, least: int = 1, most: int = 1 << 62) -> bool:
    """Whether `text` is `least` (at least 1) to `most` ASCII digits: what `[0-9]{least,most}`
    fullmatches, without importing `re` (the parsers of discovery run at every `mcpnode topo`).
    Not `str.isdigit()` alone: it also takes "²" and "١", and `int()` takes "١", "1_0" and
    surrounding whitespace."""
    return least <= len(text) <= most and text.isascii() and text.isdigit()


def is_hex(text: str, least: int = 1, most: int = 1 << 62) -> bool:
    """Whether `text` is `least` (at least 1) to `most` ASCII hex digits, either case: what
    `[0-9a-fA-F]{least,most}` fullmatches (`int(text, 16)` also takes "0x", "_" and spaces)."""
    return least <= len(text) <= most and not text.strip(_HEX_DIGITS)


def parse_decimal(
    text: str, *, max_digits: int = 20, minimum: int | None = None, maximum: int | None = None
) -> int:
    """A decimal integer (optional `-`, ASCII digits, surrounding whitespace allowed), at most
    `max_digits` digits (20: every 64-bit value) and inside [minimum, maximum] when given.
    Raises BoundError."""
    t = text.strip()
    digits = t[1:] if t[:1] == "-" else t
    if not (digits.isdigit() and digits.isascii()):  # is_digits(digits), inline: it runs hot
        raise BoundError(f"not an integer: {_clip(text)}")
    if len(digits) > max_digits:
        raise BoundError(f"integer of {len(digits)} digits (at most {max_digits})")
    value = int(t)
    if minimum is not None and value < minimum:
        raise BoundError(f"{value} is below {minimum}")
    if maximum is not None and value > maximum:
        raise BoundError(f"{value} is above {maximum}")
    return value
