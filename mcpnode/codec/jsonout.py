"""`json.dumps(obj, indent=2)`'s exact text (and with `ensure_ascii=False`), written in pieces, at
twice its speed: `topo --format json` and the published manifest.

CPython's C encoder takes no `indent` before 3.14: with one, json.dumps falls back to
json.encoder's pure-Python `_make_iterencode`, whose nested generators pass every fragment up
through each level of the document, and it gathers every fragment in one list before joining
them (~70 MiB of list and strings for an 8,192-VF host's 12 MB of `topo --format json`). Here
one recursive pass appends the same fragments to one list, hands it to `write` joined every
_FLUSH fragments, and encodes strings with the same C function json uses: the same bytes (a
test compares them over generated documents), in half the time, with the peak of one piece.

The same rules as `json.dumps(obj, indent=2)` with its other defaults: str, int (and int
subclasses, as int), float (NaN, Infinity, -Infinity allowed), True, False, None, list and
tuple, dict (keys str, int, float, bool or None); anything else is the same TypeError. A
cyclic document is a RecursionError where json says "Circular reference detected": the
documents written here are trees built for output.
"""

from __future__ import annotations

try:
    # json.encoder's own C string encoders, from the accelerator it takes them from
    # (Lib/json/encoder.py): importing json.encoder imports re for its pure-Python fallbacks,
    # which `topo` would otherwise never load (codec/typenames.py says what that costs).
    from _json import encode_basestring, encode_basestring_ascii
except ImportError:  # an interpreter without the accelerator: json's own fallbacks
    from json.encoder import encode_basestring, encode_basestring_ascii

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (codec/typenames.py)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_FLUSH = 16384  # fragments per write: ~250-500 kB of JSON
_INF = float("inf")


def _float(o: float) -> str:
    """json.encoder's floatstr with allow_nan=True."""
    if o != o:
        return "NaN"
    if o == _INF:
        return "Infinity"
    if o == -_INF:
        return "-Infinity"
    return float.__repr__(o)


def _key(k: object) -> str:
    """A dict key as json converts it, in json's order of tests."""
    if isinstance(k, str):
        return k
    if isinstance(k, float):
        return _float(k)
    if k is True:
        return "true"
    if k is False:
        return "false"
    if k is None:
        return "null"
    if isinstance(k, int):
        return int.__repr__(k)
    raise TypeError(f"keys must be str, int, float, bool or None, not {k.__class__.__name__}")


def write_json(obj: Any, write: Callable[[str], object], *, ensure_ascii: bool = True) -> None:
    """Write `json.dumps(obj, indent=2, ensure_ascii=ensure_ascii)` through `write`, in pieces
    (module docstring)."""
    parts: list[str] = []
    append = parts.append
    # json's own C functions, as json.dumps picks them by ensure_ascii
    enc = encode_basestring_ascii if ensure_ascii else encode_basestring

    def value(o: Any, nl: str) -> None:
        t = type(o)
        # The exact types first (what documents hold), then json's own isinstance order.
        if t is str:
            append(enc(o))
        elif t is dict:
            mapping(o, nl)
        elif t is list or t is tuple:
            array(o, nl)
        elif t is int:
            append(int.__repr__(o))
        elif o is None:
            append("null")
        elif o is True:
            append("true")
        elif o is False:
            append("false")
        elif isinstance(o, str):
            append(enc(o))
        elif isinstance(o, int):
            append(int.__repr__(o))
        elif isinstance(o, float):
            append(_float(o))
        elif isinstance(o, list | tuple):
            array(o, nl)
        elif isinstance(o, dict):
            mapping(o, nl)
        else:
            raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")

    def array(o: list[Any] | tuple[Any, ...], nl: str) -> None:
        if not o:
            append("[]")
            return
        inner = nl + "  "
        sep = "," + inner
        append("[" + inner)
        first = True
        for v in o:
            if first:
                first = False
            else:
                append(sep)
            value(v, inner)
        append(nl + "]")
        if len(parts) >= _FLUSH:
            write("".join(parts))
            parts.clear()

    def mapping(o: dict[Any, Any], nl: str) -> None:
        if not o:
            append("{}")
            return
        inner = nl + "  "
        sep = "," + inner
        append("{" + inner)
        first = True
        for k, v in o.items():
            if first:
                first = False
            else:
                append(sep)
            append(enc(k if type(k) is str else _key(k)) + ": ")
            value(v, inner)
        append(nl + "}")

    value(obj, "\n")
    write("".join(parts))


def dumps(obj: Any, *, ensure_ascii: bool = True) -> str:
    """`json.dumps(obj, indent=2, ensure_ascii=ensure_ascii)`, by write_json."""
    out: list[str] = []
    write_json(obj, out.append, ensure_ascii=ensure_ascii)
    return "".join(out)
