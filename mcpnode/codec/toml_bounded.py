"""TOML parsing that a hostile file cannot turn into a hang, a memory blow-up or a traceback.

tomllib (and tomli, its 3.10 backport) is recursive and keeps, for every dotted key, flags for
each of its prefixes, so (measured with Python 3.11's tomllib):
- `x = [[[[...]]]]` or `{a = {a = ...}}` a few thousand deep raises RecursionError;
- one key of 16,000 dotted segments (`a.a.a...= 1`, a 32 KB line) takes 6 s and 1 GB: the cost
  is quadratic in the segments;
- an integer of more than 4300 digits raises ValueError (CPython's int-parsing limit), which is
  not a TOMLDecodeError.

So before parsing, one linear scan (strings and comments skipped as TOML defines them) bounds
the nesting of `[`/`{` and the length of dotted chains; whatever the parser still raises
(TOMLDecodeError, RecursionError, ValueError) becomes TomlRejected with the parser's message.
No mcpnode file comes near the bounds: profiles nest two deep and use two-segment keys.
"""

from __future__ import annotations

import re
import sys
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

MAX_NESTING = 32
MAX_DOTTED_SEGMENTS = 64

_WORD_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+:\"'")


class TomlRejected(ValueError):
    """The text is not TOML mcpnode will use; the message says why (line and column when the
    parser gave them)."""


# One token at a time: strings (multi-line first), comments, brackets, dots and newlines
# singly, runs of bare-key characters, runs of anything else. re.DOTALL for multi-line strings.
_Q3 = '"' * 3  # a multi-line basic string's delimiter
_A3 = "'" * 3  # a multi-line literal string's delimiter
_TOKEN = re.compile(
    "|".join(
        (
            _Q3 + r"(?:\\.|[^\\])*?" + _Q3 + '"*',  # multi-line basic string (escapes)
            _A3 + ".*?" + _A3 + "'*",  # multi-line literal string
            r'"(?:\\.|[^"\\\n])*"?',  # basic string (unclosed: up to the line's end)
            r"'[^'\n]*'?",  # literal string
            r"#[^\n]*",  # comment
            r"[\[\]{}.\n]",
            r"[A-Za-z0-9_+:-]+",  # bare key, number, date
            r"[ \t\r]+",
            r"[^\[\]{}.\n#" + "\"'" + r"A-Za-z0-9_+:\- \t\r]+",  # = , and the rest
            _Q3 + "|" + _A3,  # an unclosed multi-line string's opening
        )
    ),
    re.DOTALL,
)


def bounds_problem(text: str) -> str | None:
    """Why `text` is refused before parsing (too deep, too long a dotted key), or None.

    Linear: one pass over tokens; quoted strings (basic, literal, both multi-line forms) and
    comments are single tokens, so brackets and dots inside them do not count. A dotted chain is
    a run of bare or quoted words joined by `.` (whitespace allowed around the dots, as TOML
    allows in keys); floats (`1.5`, `1e3`) are chains of two at most."""
    depth = 0
    chain = 0  # words in the current dotted chain
    after_dot = False
    line = 1
    for m in _TOKEN.finditer(text):
        tok = m.group()
        c = tok[0]
        if c in " \t\r":
            continue
        if c == "\n":
            line += 1
            chain, after_dot = 0, False
        elif c == "#":
            continue
        elif c in "[{":
            depth += 1
            if depth > MAX_NESTING:
                return f"line {line}: arrays or tables nested deeper than {MAX_NESTING}"
            chain, after_dot = 0, False
        elif c in "]}":
            depth -= 1
            chain, after_dot = 0, False
        elif c == ".":
            after_dot = True
        elif c in _WORD_START:
            if c in "\"'":
                line += tok.count("\n")
            chain = chain + 1 if after_dot or chain == 0 else 1
            after_dot = False
            if chain > MAX_DOTTED_SEGMENTS:
                return f"line {line}: a dotted key of more than {MAX_DOTTED_SEGMENTS} segments"
        else:
            chain, after_dot = 0, False
    return None


def loads(text: str) -> dict[str, Any]:
    """Parse TOML text. Raises TomlRejected (a ValueError) for anything the bounds or the
    parser refuse."""
    problem = bounds_problem(text)
    if problem is not None:
        raise TomlRejected(problem)
    try:
        doc: dict[str, Any] = tomllib.loads(text)
    except RecursionError:
        raise TomlRejected("nested too deeply to parse") from None
    except ValueError as err:  # TOMLDecodeError, and int() past CPython's 4300-digit limit
        raise TomlRejected(str(err)) from None
    return doc
