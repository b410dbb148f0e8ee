"""Text from files made safe for a terminal: the one control-character helper every text
renderer uses for strings that came from outside mcpnode (a manifest, NVML answers, sysfs,
`/proc/PID/comm`, a snapshot, an `[expect]` file).

A string read from a file can hold ESC sequences (recolour, move the cursor, retitle the window,
OSC 52 writes the clipboard on some terminals), a newline that forges a row of a table, or a
bidirectional override that shows text in another order than it is (CVE-2021-42574, "Trojan
Source"). `printable` replaces each such character with a visible escape (`\\x1b`, `\\n`,
`\\u202e`), so the evidence stays readable and nothing reaches the terminal as a control. Pure;
the common case (nothing to replace) is one C-level `str.isprintable` call.
"""

from __future__ import annotations

__all__ = ["printable"]

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """`text` with every character Python does not call printable (Unicode categories Cc, Cf,
    Cs, Co, Cn, Zl, Zp and Zs other than the space: C0/C1 controls, DEL, bidi overrides, line
    and paragraph separators, lone surrogates) replaced by its backslash escape."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _escape(c: str) -> str:
    named = _NAMED.get(c)
    if named is not None:
        return named
    code = ord(c)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
