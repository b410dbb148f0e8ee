"""The Prometheus exposition formats, written: the text format (0.0.4, and 1.0.0 with its name
escaping when a scraper negotiates it) and OpenMetrics 1.0, with the content negotiation and
the gzip check of prometheus_client's own server (`exposition.choose_encoder`,
`exposition.gzip_accepted`), so a scrape gets the bytes prometheus_client 0.26 would write for
the same families under the same `Accept`.

Why not prometheus_client itself: its package `__init__` imports `prometheus_client.exposition`,
which imports `http.server`, `urllib.request`, `wsgiref` and `ssl` for the push gateway and
the servers the agent never starts, and no submodule of the package can be imported without
that `__init__`. For `mcpnode agent` that was about 2.7 MB of resident memory for code it
never runs (bench/bench_agent.py); the agent's families are made in `agent/series.py`.
tests/codec/test_promtext.py compares every format and escaping this module writes with
prometheus_client's own, byte for byte, over generated families and Accept headers;
tests/agent/test_series.py over the agent's real registry, tests/placement/test_export_prom.py
over the node_exporter textfile of every recorded host.

One deliberate difference: prometheus_client raises TypeError for an `Accept` whose
`version=` has a part that is not a number where the comparison with 1.0.0 reaches it
(`version=abc`, `version=1.x`); here such an entry is passed over, as one below 1.0.0 is.

Pure: families in, bytes out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Literal, NamedTuple

MetricType = Literal["counter", "gauge", "histogram", "info"]

# What a scrape gets unless it negotiates more: the text format 0.0.4.
CONTENT_TYPE_TEXT = "text/plain; version=0.0.4; charset=utf-8"
CONTENT_TYPE_TEXT_1 = "text/plain; version=1.0.0; charset=utf-8"
CONTENT_TYPE_OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"

# The `escaping=` values of an Accept entry (Prometheus' UTF-8 name escaping schemes); any
# other value means "underscores".
ALLOW_UTF8 = "allow-utf-8"
UNDERSCORES = "underscores"
DOTS = "dots"
VALUES = "values"
ESCAPINGS = (ALLOW_UTF8, UNDERSCORES, DOTS, VALUES)

# prometheus_client's patterns, used as it uses them (`match`, so `$` also matches before a
# final newline): the names it writes unescaped are the names written unescaped here.
_LEGACY_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LEGACY_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# Samples of these suffixes have no place in the text format: each is written after its family
# as a gauge family of its own (OpenMetrics' `_created`; a gauge histogram's `_gsum`, `_gcount`).
_TEXT_APART = ("_created", "_gcount", "_gsum")


class Sample(NamedTuple):
    """One line of a family: the full sample name (`x_total`, `x_bucket`, ...), its labels in
    any order (written sorted by name) and its value."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


class Family(NamedTuple):
    """One metric family as OpenMetrics names it: a counter's name is without `_total`, an
    info's without `_info` (its samples are `<name>_info` with value 1)."""

    name: str
    documentation: str
    type: MetricType
    samples: Sequence[Sample]


Encoder = Callable[[Iterable[Family]], bytes]


def format_value(value: float) -> str:
    """A sample value as Go writes a float64 (prometheus_client's `floatToGoString`): `+Inf`,
    `-Inf`, `NaN`, Python's repr otherwise, switched to an exponent past 6 integer digits."""
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    if math.isnan(value):
        return "NaN"
    s = repr(float(value))
    dot = s.find(".")
    if value > 0 and dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


def _legacy_rune(char: str, index: int, colon: bool) -> bool:
    return (
        "a" <= char <= "z"
        or "A" <= char <= "Z"
        or char == "_"
        or ("0" <= char <= "9" and index > 0)
        or (colon and char == ":")
    )


def _escape(s: str, escaping: str, colon: bool) -> str:
    """A name under an escaping scheme; for ALLOW_UTF8 (and label values, always) backslash,
    newline and double quote escaped. `colon`: whether `:` is a valid character (metric names)."""
    if escaping == ALLOW_UTF8:
        return s.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    out: list[str] = []
    if escaping == UNDERSCORES:
        for i, c in enumerate(s):
            out.append(c if _legacy_rune(c, i, colon) else "_")
    elif escaping == DOTS:
        for i, c in enumerate(s):
            if c == "_":
                out.append("__")
            elif c == ".":
                out.append("_dot_")
            else:
                out.append(c if _legacy_rune(c, i, colon) else "__")
    elif escaping == VALUES:
        out.append("U__")
        for i, c in enumerate(s):
            if c == "_":
                out.append("__")
            elif _legacy_rune(c, i, colon):
                out.append(c)
            elif 0xD800 <= ord(c) <= 0xDFFF:  # a lone surrogate is not UTF-8
                out.append("_FFFD_")
            else:
                out.append(f"_{ord(c):x}_")
    else:
        return s
    return "".join(out)


def _legacy_metric_name(name: str) -> bool:
    return _LEGACY_METRIC_NAME.match(name) is not None


def _legacy_label_name(name: str) -> bool:
    return _LEGACY_LABEL_NAME.match(name) is not None and not name.startswith("__")


def _escape_name(name: str, escaping: str, *, label: bool) -> str:
    """A metric (or label) name as written: under ALLOW_UTF8 escaped, and quoted when not
    legacy-valid; under UNDERSCORES and VALUES unchanged when legacy-valid; under DOTS always
    escaped (every underscore doubled)."""
    if not name:
        return name
    legacy = _legacy_label_name(name) if label else _legacy_metric_name(name)
    if escaping == ALLOW_UTF8:
        escaped = _escape(name, escaping, not label)
        return escaped if legacy else f'"{escaped}"'
    if legacy and escaping in (UNDERSCORES, VALUES):
        return name
    return _escape(name, escaping, not label)


def _labels(labels: tuple[tuple[str, str], ...], escaping: str) -> str:
    return ",".join(
        f'{_escape_name(k, escaping, label=True)}="{_escape(v, ALLOW_UTF8, False)}"'
        for k, v in sorted(labels)
    )


def _text_sample(s: Sample, escaping: str) -> str:
    labels = _labels(s.labels, escaping)
    name = _escape_name(s.name, escaping, label=False)
    if escaping != ALLOW_UTF8 or _legacy_metric_name(s.name):
        if labels:
            labels = "{" + labels + "}"
        return f"{name}{labels} {format_value(s.value)}\n"
    comma = "," if labels else ""
    return f"{{{name}{comma}{labels}}} {format_value(s.value)}\n"


def _text_head(name: str, documentation: str, kind: str, escaping: str) -> str:
    shown = _escape_name(name, escaping, label=False)
    help_text = documentation.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {shown} {help_text}\n# TYPE {shown} {kind}\n"


def text(families: Iterable[Family], escaping: str = UNDERSCORES) -> bytes:
    """The text format (0.0.4; 1.0.0 with `escaping`). A counter's HELP and TYPE name its
    samples' `_total` name, an info's its `_info` name and type gauge (the text format has no
    info type); HELP escapes backslash and newline."""
    out: list[str] = []
    for family in families:
        name, kind = family.name, family.type
        if kind == "counter":
            name += "_total"
        elif kind == "info":
            name, kind = name + "_info", "gauge"
        out.append(_text_head(name, family.documentation, kind, escaping))
        apart: dict[str, list[str]] = {}
        for s in family.samples:
            suffix = s.name[len(family.name) :]
            if s.name.startswith(family.name) and suffix in _TEXT_APART:
                apart.setdefault(suffix, []).append(_text_sample(s, escaping))
            else:
                out.append(_text_sample(s, escaping))
        for suffix, lines in sorted(apart.items()):
            out.append(_text_head(family.name + suffix, family.documentation, "gauge", escaping))
            out.extend(lines)
    return "".join(out).encode()


def openmetrics(families: Iterable[Family], escaping: str = UNDERSCORES) -> bytes:
    """OpenMetrics 1.0: HELP escapes backslash, newline and double quote; `# EOF` last."""
    out: list[str] = []
    for family in families:
        shown = _escape_name(family.name, escaping, label=False)
        out.append(
            f"# HELP {shown} {_escape(family.documentation, ALLOW_UTF8, False)}\n"
            f"# TYPE {shown} {family.type}\n"
        )
        for s in family.samples:
            quoted = escaping == ALLOW_UTF8 and not _legacy_metric_name(s.name)
            labels = _escape_name(s.name, escaping, label=False) if quoted else ""
            if quoted and s.labels:
                labels += ","
            labels += _labels(s.labels, escaping)
            if labels:
                labels = "{" + labels + "}"
            # prometheus_client escapes a sample's own name with the label-name character set.
            sample = "" if quoted else _escape(s.name, escaping, False)
            out.append(f"{sample}{labels} {format_value(s.value)}\n")
    out.append("# EOF\n")
    return "".join(out).encode()


def _parameter(tokens: Sequence[str], key: str) -> str | None:
    for token in tokens:
        if "=" in token:
            name, value = token.strip().split("=", 1)
            if name == key:
                return value
    return None


def _at_least_1_0_0(version: str) -> bool | None:
    """prometheus_client's `parse_version(version) >= (1, 0, 0)`: parts compared as ints in
    order; None where that comparison would meet a part that is not an int (it raises)."""
    parts = version.split(".")
    for part, floor in zip(parts, (1, 0, 0), strict=False):
        try:
            number = int(part)
        except ValueError:
            return None
        if number != floor:
            return number > floor
    return len(parts) >= 3


def negotiate(accept: str) -> tuple[Encoder, str]:
    """The encoder and Content-Type for an `Accept` header, as prometheus_client's
    `choose_encoder` picks them: the first entry (q-values are not weighed) that is
    `application/openmetrics-text` without a version or with one >= 1.0.0 (OpenMetrics; the
    version and escaping echoed in the Content-Type when given), or `text/plain` with a
    version >= 1.0.0 (text 1.0.0 with its escaping); otherwise text 0.0.4."""
    for entry in (accept or "").split(","):
        tokens = entry.split(";")
        media = tokens[0].strip()
        if media not in ("application/openmetrics-text", "text/plain"):
            continue
        version = _parameter(tokens, "version") or ""
        given = _parameter(tokens, "escaping")
        escaping = given if given in ESCAPINGS else UNDERSCORES
        if media == "application/openmetrics-text" and not version:
            return openmetrics, CONTENT_TYPE_OPENMETRICS
        if version and _at_least_1_0_0(version):
            if media == "text/plain":
                content_type = f"{CONTENT_TYPE_TEXT_1}; escaping={escaping}"
                return partial(text, escaping=escaping), content_type
            content_type = (
                f"application/openmetrics-text; version={version}; charset=utf-8; "
                f"escaping={escaping}"
            )
            return partial(openmetrics, escaping=escaping), content_type
    return text, CONTENT_TYPE_TEXT


def gzip_accepted(accept_encoding: str) -> bool:
    """Whether an `Accept-Encoding` header lists gzip (any q-value, as prometheus_client)."""
    return any(
        coding.split(";")[0].strip().lower() == "gzip"
        for coding in (accept_encoding or "").split(",")
    )
