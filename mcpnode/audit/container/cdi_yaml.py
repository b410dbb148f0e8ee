"""A small YAML reader for CDI specs, so the audit needs no YAML library.

CDI specs (`nvidia-ctk cdi generate`, the GPU Operator, the k8s device plugin) are written by
Go's yaml encoders: block mappings and sequences, sequences of mappings in compact form
(`- name: "0"`), plain and quoted scalars, the odd empty flow collection (`[]`, `{}`). That
subset is read here; anything else is refused with a line number:

- `YamlError` for text that is not YAML (bad indentation, a line that is neither `key: value`
  nor `- item`, an unterminated quote, a duplicate key);
- `YamlUnsupported` (a subclass) for valid YAML outside the subset: anchors, aliases, tags,
  block scalars (`|`, `>`), multi-line plain scalars, several documents in one file.

Scalars follow the YAML 1.2 core schema for what a spec can hold: `null`/`~`, `true`/`false`,
decimal integers; everything else stays a string (`0.5.0`, `nvidia.com/gpu`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

YamlValue = object  # dict[str, YamlValue] | list[YamlValue] | str | int | bool | None


class YamlError(ValueError):
    """Not YAML. `line` is 1-based (0 when the problem is the whole text)."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}" if line else message)
        self.line = line
        self.message = message


class YamlUnsupported(YamlError):
    """Valid YAML that this reader does not handle."""


@dataclass
class _Line:
    number: int  # 1-based, for messages
    indent: int
    text: str  # without indentation, comment and trailing blanks


_INT = re.compile(r"[-+]?[0-9]+\Z")
_NULLS = frozenset({"null", "Null", "NULL", "~", ""})
_TRUE = frozenset({"true", "True", "TRUE"})
_FALSE = frozenset({"false", "False", "FALSE"})


def parse_yaml(text: str) -> YamlValue:
    """Parse one YAML document of the subset above. Raises YamlError (or YamlUnsupported)."""
    lines = _lines(text)
    if not lines:
        return None
    value, end = _block(lines, 0, lines[0].indent)
    if end < len(lines):
        raise YamlError(lines[end].number, "unexpected indentation")
    return value


def _lines(text: str) -> list[_Line]:
    out: list[_Line] = []
    started = False
    for number, raw in enumerate(text.splitlines(), 1):
        body = raw.lstrip(" ")
        if body.startswith("\t"):
            raise YamlError(number, "tab in indentation")
        body = _strip_comment(body, number).rstrip()
        if not body:
            continue
        if raw.startswith("%"):
            raise YamlUnsupported(number, "directives (%YAML, %TAG)")
        if body == "---" or body.startswith("--- "):
            if started:
                raise YamlUnsupported(number, "more than one document")
            started = True
            if body != "---":
                raise YamlUnsupported(number, "content on the document start line")
            continue
        if body == "...":
            break
        started = True
        out.append(_Line(number, len(raw) - len(raw.lstrip(" ")), body))
    return out


def _strip_comment(body: str, number: int) -> str:
    """Cut a `#` comment: at the start of the line or after a blank, outside quotes. A quote
    opens a quoted scalar only where a scalar can start (line start, after `: `, `- `, `[`,
    `{`, `,`), so an apostrophe inside a plain scalar (`it's`) is just a character."""
    i = 0
    n = len(body)
    while i < n:
        c = body[i]
        if c == "#" and (i == 0 or body[i - 1] in " \t"):
            return body[:i]
        if c in "'\"" and _scalar_may_start(body, i):
            i = _skip_quoted(body, i, number)
            continue
        i += 1
    return body


_QUOTE_MAY_OPEN = re.compile(r"(?:\A|[\[{,] *|: +|(?:\A| )[-?] +)\Z")


def _scalar_may_start(body: str, i: int) -> bool:
    return _QUOTE_MAY_OPEN.search(body[:i]) is not None


def _skip_quoted(s: str, i: int, number: int) -> int:
    """Index just past the quoted scalar opening at s[i]."""
    quote = s[i]
    j = i + 1
    while j < len(s):
        if quote == '"' and s[j] == "\\":
            j += 2
            continue
        if s[j] == quote:
            if quote == "'" and j + 1 < len(s) and s[j + 1] == "'":
                j += 2  # '' is an escaped quote in a single-quoted scalar
                continue
            return j + 1
        j += 1
    raise YamlUnsupported(number, "quoted scalar continues on the next line")


def _is_item(text: str) -> bool:
    return text == "-" or text.startswith("- ")


def _block(lines: list[_Line], i: int, indent: int) -> tuple[YamlValue, int]:
    if _is_item(lines[i].text):
        return _sequence(lines, i, indent)
    return _mapping(lines, i, indent)


def _sequence(lines: list[_Line], i: int, indent: int) -> tuple[list[YamlValue], int]:
    out: list[YamlValue] = []
    while i < len(lines) and lines[i].indent == indent and _is_item(lines[i].text):
        line = lines[i]
        rest = line.text[1:].lstrip(" ")
        if not rest:
            if i + 1 < len(lines) and lines[i + 1].indent > indent:
                value, i = _block(lines, i + 1, lines[i + 1].indent)
            else:
                value, i = None, i + 1
            out.append(value)
            continue
        # `- key: value` opens a mapping whose further keys sit under `key`; read the rest of
        # the line as if it were its own line at that column.
        column = indent + len(line.text) - len(rest)
        lines[i] = _Line(line.number, column, rest)
        if _is_item(rest) or _split_key(rest, line.number) is not None:
            value, i = _block(lines, i, column)
        else:
            value = _scalar(rest, line.number)
            i += 1
            _no_continuation(lines, i, indent, rest)
        out.append(value)
    if i < len(lines) and lines[i].indent > indent:
        raise YamlError(lines[i].number, "bad indentation in a sequence")
    return out, i


def _mapping(lines: list[_Line], i: int, indent: int) -> tuple[dict[str, YamlValue], int]:
    out: dict[str, YamlValue] = {}
    while i < len(lines) and lines[i].indent == indent and not _is_item(lines[i].text):
        line = lines[i]
        split = _split_key(line.text, line.number)
        if split is None:
            raise YamlError(line.number, f"expected 'key: value', got {line.text[:40]!r}")
        key, rest = split
        if key in out:
            raise YamlError(line.number, f"duplicate key {key!r}")
        i += 1
        if rest:
            out[key] = _scalar(rest, line.number)
            _no_continuation(lines, i, indent, rest)
        elif i < len(lines) and lines[i].indent > indent:
            out[key], i = _block(lines, i, lines[i].indent)
        elif i < len(lines) and lines[i].indent == indent and _is_item(lines[i].text):
            out[key], i = _sequence(lines, i, indent)  # `key:` then `- item` at its column
        else:
            out[key] = None
    if i < len(lines) and lines[i].indent > indent:
        raise YamlError(lines[i].number, "bad indentation in a mapping")
    return out, i


def _no_continuation(lines: list[_Line], i: int, indent: int, value: str) -> None:
    """A line indented under a scalar value: a plain scalar folded over lines (valid YAML this
    reader does not take), or an error when it cannot be one: after a quoted or flow value, or
    when the line holds a mapping entry (YAML: "mapping values are not allowed here")."""
    if i >= len(lines) or lines[i].indent <= indent:
        return
    nxt = lines[i]
    if value[0] in "'\"[{" or _is_item(nxt.text) or re.search(r":(?: |\Z)", nxt.text):
        raise YamlError(nxt.number, f"bad indentation: {nxt.text[:40]!r} under a scalar value")
    raise YamlUnsupported(nxt.number, "multi-line plain scalar")


def _split_key(text: str, number: int) -> tuple[str, str] | None:
    """`key: rest` -> (key, rest); None when the line is not a mapping entry."""
    if text.startswith(("'", '"')):
        end = _skip_quoted(text, 0, number)
        after = text[end:].lstrip(" ")
        if not after.startswith(":"):
            return None
        key = _scalar(text[:end], number)
        return str(key), after[1:].strip()
    if text.startswith(("? ", "&", "*", "!")):
        raise YamlUnsupported(number, f"{text[0]!r} (complex keys, anchors, aliases, tags)")
    if text.startswith(("[", "{")):
        return None
    m = re.search(r":(?: |\Z)", text)
    if m is None:
        return None
    return text[: m.start()].rstrip(), text[m.end() :].strip()


def _scalar(text: str, number: int) -> YamlValue:
    c = text[0]
    if c in "&*!":
        raise YamlUnsupported(number, "anchors, aliases and tags")
    if c in "|>":
        raise YamlUnsupported(number, "block scalars")
    if c in "[{":
        value, end = _flow(text, 0, number)
        if text[end:].strip():
            raise YamlError(number, f"text after a flow collection: {text[end:][:20]!r}")
        return value
    if c in "'\"":
        end = _skip_quoted(text, 0, number)
        if text[end:].strip():
            raise YamlError(number, f"text after a quoted scalar: {text[end:][:20]!r}")
        return _unquote(text[:end], number)
    return _plain(text)


def _plain(text: str) -> YamlValue:
    if text in _NULLS:
        return None
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    if _INT.match(text):
        return int(text)
    return text


def _unquote(token: str, number: int) -> str:
    if token[0] == "'":
        return token[1:-1].replace("''", "'")
    try:
        value = json.loads(token)  # YAML's double-quoted escapes are JSON's plus a few rare
    except ValueError as err:
        raise YamlUnsupported(number, f"escape in {token[:30]!r}: {err}") from err
    assert isinstance(value, str)
    return value


def _flow(s: str, i: int, number: int) -> tuple[YamlValue, int]:
    """A flow collection starting at s[i] (`[`, `{`); returns it and the index past it."""
    close = "]" if s[i] == "[" else "}"
    items: list[YamlValue] = []
    mapping: dict[str, YamlValue] = {}
    i += 1
    while True:
        i = _skip_blanks(s, i)
        if i >= len(s):
            raise YamlUnsupported(number, "flow collection continues on the next line")
        if s[i] == close:
            return (items if close == "]" else mapping), i + 1
        key, i = _flow_node(s, i, number, close)
        i = _skip_blanks(s, i)
        if close == "}":
            if i >= len(s) or s[i] != ":":
                raise YamlError(number, "expected ':' in a flow mapping")
            value, i = _flow_node(s, _skip_blanks(s, i + 1), number, close)
            mapping[str(key)] = value
            i = _skip_blanks(s, i)
        else:
            items.append(key)
        if i < len(s) and s[i] == ",":
            i += 1
        elif i < len(s) and s[i] != close:
            raise YamlError(number, f"expected ',' or {close!r} in a flow collection")


def _flow_node(s: str, i: int, number: int, close: str) -> tuple[YamlValue, int]:
    if i < len(s) and s[i] in "[{":
        return _flow(s, i, number)
    if i < len(s) and s[i] in "'\"":
        end = _skip_quoted(s, i, number)
        return _unquote(s[i:end], number), end
    stops = ",]}" + (":" if close == "}" else "")
    j = i
    while j < len(s) and s[j] not in stops:
        j += 1
    token = s[i:j].strip()
    if token[:1] in ("&", "*", "!"):
        raise YamlUnsupported(number, "anchors, aliases and tags")
    return _plain(token), j


def _skip_blanks(s: str, i: int) -> int:
    while i < len(s) and s[i] == " ":
        i += 1
    return i
