"""mcpnode's Prometheus exposition against prometheus_client's own writers, byte for byte: both
formats under every name escaping, over families of any names, label values and help text;
the content negotiation over the Accept headers scrapers send and over generated ones; the
float format; the gzip check. The agent's own families are compared in
tests/agent/test_series.py, the textfile's in tests/placement/test_export_prom.py."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.exposition import choose_encoder
from prometheus_client.exposition import gzip_accepted as reference_gzip_accepted
from prometheus_client.utils import floatToGoString

from mcpnode.codec import promtext
from mcpnode.codec.promtext import Family, Sample
from tests.support import promref

FAMILIES = [
    Family("c", "a counter", "counter", [Sample("c_total", (), 3.0)]),
    Family(
        "lab",
        'help with "quotes", a \\ and a\nnewline',
        "gauge",
        [
            Sample("lab", (("z", "last"), ("a", 'va"l\\ue\nx')), 1e22),
            Sample("lab", (("z", "ü"), ("a", "")), -0.0),
        ],
    ),
    Family(
        "h",
        "a histogram",
        "histogram",
        [
            Sample("h_bucket", (("le", "0.001"),), 1.0),
            Sample("h_bucket", (("le", "+Inf"),), 2.0),
            Sample("h_count", (), 2.0),
            Sample("h_sum", (), 0.5),
        ],
    ),
    Family("i", "an info", "info", [Sample("i_info", (("gpu", "0"), ("uuid", "GPU-1")), 1.0)]),
    Family("empty", "labelled, no series yet", "counter", []),
    Family(
        "c2", "created apart", "counter", [Sample("c2_total", (), 1), Sample("c2_created", (), 1.5)]
    ),
    Family(
        "dotted.name", "not a legacy name", "gauge", [Sample("dotted.name", (("we-ird", "x"),), 1)]
    ),
    Family("nl\n", "a name prometheus_client's $ passes", "gauge", [Sample("nl\n", (), 2)]),
]


@pytest.mark.parametrize("escaping", promref.ESCAPINGS)
def test_both_formats_under_every_escaping(escaping: str) -> None:
    ref = promref.Reference(FAMILIES)
    assert promtext.text(FAMILIES, escaping) == promref.text(ref, escaping)
    assert promtext.openmetrics(FAMILIES, escaping) == promref.openmetrics_text(ref, escaping)


@pytest.mark.parametrize("accept", promref.ACCEPTS)
def test_negotiation_as_choose_encoder(accept: str) -> None:
    encoder, content_type = promtext.negotiate(accept)
    body, reference_type = promref.scrape(promref.Reference(FAMILIES), accept)
    assert content_type == reference_type
    assert encoder(FAMILIES) == body


# A name or label value of any characters but lone surrogates (which no UTF-8 writer takes).
_chars = st.characters(blacklist_categories=["Cs"])
_names = st.one_of(
    st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,12}", fullmatch=True),
    st.text(_chars, min_size=1, max_size=12),
)
_values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**20), 10**20).map(float),
    st.sampled_from([0.0, -0.0, 1e-9, 123456.0, 1234567.0, 1e22, 0.1 + 0.2]),
)


@st.composite
def _family(draw: st.DrawFn) -> Family:
    name = draw(_names)
    kind: promtext.MetricType = draw(st.sampled_from(["counter", "gauge", "histogram", "info"]))
    suffixes = st.sampled_from(["", "_total", "_bucket", "_count", "_sum", "_info", "_created"])
    samples = draw(
        st.lists(
            st.builds(
                Sample,
                st.one_of(suffixes.map(lambda s: name + s), _names),
                st.dictionaries(_names, st.text(_chars, max_size=8), max_size=3).map(
                    lambda d: tuple(d.items())
                ),
                _values,
            ),
            max_size=4,
        )
    )
    return Family(name, draw(st.text(_chars, max_size=20)), kind, samples)


@settings(max_examples=300, deadline=None)
@given(families=st.lists(_family(), max_size=4), escaping=st.sampled_from(promref.ESCAPINGS))
def test_any_families_as_prometheus_client(families: list[Family], escaping: str) -> None:
    ref = promref.Reference(families)
    assert promtext.text(families, escaping) == promref.text(ref, escaping)
    assert promtext.openmetrics(families, escaping) == promref.openmetrics_text(ref, escaping)


_media = st.sampled_from(
    ["application/openmetrics-text", "text/plain", "text/html", "*/*", " text/plain ", "TEXT/PLAIN"]
)
_parameters = st.sampled_from(
    [
        "version=1.0.0",
        "version=0.0.4",
        "version=0.0.1",
        "version=2.0.0",
        "version=1",
        "version=1.0",
        "version=10",
        "version= 1.0.0",
        "version=",
        "escaping=allow-utf-8",
        "escaping=underscores",
        "escaping=dots",
        "escaping=values",
        "escaping=bogus",
        "q=0.5",
        " version=1.0.0",
        "charset=utf-8",
    ]
)
_entries = st.builds(
    lambda media, params: ";".join([media, *params]), _media, st.lists(_parameters, max_size=3)
)


@settings(max_examples=300, deadline=None)
@given(entries=st.lists(_entries, max_size=4))
def test_any_accept_as_choose_encoder(entries: list[str]) -> None:
    accept = ",".join(entries)
    encoder, content_type = promtext.negotiate(accept)
    body, reference_type = promref.scrape(promref.Reference(FAMILIES), accept)
    assert (content_type, encoder(FAMILIES)) == (reference_type, body)


@pytest.mark.parametrize(
    ("accept", "content_type"),
    [
        ("application/openmetrics-text; version=abc", promtext.CONTENT_TYPE_TEXT),
        ("text/plain; version=1.x", promtext.CONTENT_TYPE_TEXT),
        ("text/plain; version=1.", promtext.CONTENT_TYPE_TEXT),
        (
            "application/openmetrics-text; version=x, application/openmetrics-text",
            promtext.CONTENT_TYPE_OPENMETRICS,
        ),
    ],
)
def test_a_version_that_is_no_number_is_passed_over(accept: str, content_type: str) -> None:
    # prometheus_client raises TypeError comparing the version's parts with 1.0.0; the agent
    # answers as if the entry were a version below 1.0.0.
    with pytest.raises(TypeError):
        choose_encoder(accept)
    assert promtext.negotiate(accept)[1] == content_type


@given(st.one_of(_values, st.integers(-(10**30), 10**30)))
def test_float_format_as_go(value: float) -> None:
    assert promtext.format_value(value) == floatToGoString(value)  # type: ignore[no-untyped-call]


@pytest.mark.parametrize(
    ("value", "written"),
    [
        (1.0, "1.0"),
        (1e22, "1e+22"),
        (1234567.0, "1.234567e+06"),
        (123456.0, "123456.0"),
        (-1234567.0, "-1234567.0"),
        (math.inf, "+Inf"),
        (-math.inf, "-Inf"),
        (math.nan, "NaN"),
        (0.1 + 0.2, "0.30000000000000004"),
        (5, "5.0"),
    ],
)
def test_float_format(value: float, written: str) -> None:
    assert promtext.format_value(value) == written


@given(st.text(st.sampled_from("gzip, ;q=0.5GZIPdeflate*x"), max_size=30))
def test_gzip_accepted_as_prometheus_client(header: str) -> None:
    assert promtext.gzip_accepted(header) == reference_gzip_accepted(header)


def test_gzip_accepted() -> None:
    assert promtext.gzip_accepted("deflate, GZip;q=0.1")
    assert not promtext.gzip_accepted("identity, x-gzip")
    assert not promtext.gzip_accepted("")
