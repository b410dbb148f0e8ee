"""The bounded codecs (mcpnode/codec/bounded.py, mcpnode/codec/cpus.py) and the control-character
helper (mcpnode/codec/printable.py): table-tested, with the hostile inputs files have carried."""

from __future__ import annotations

import pytest

from mcpnode.codec.bounded import BoundError, parse_decimal
from mcpnode.codec.cpus import MAX_CPULIST_BYTES, format_list, format_mask, parse_list, parse_mask
from mcpnode.codec.printable import printable
from mcpnode.topology.parse import ParseError, parse_cpulist, parse_cpumask, parse_int


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("", set()),
        ("  \n", set()),
        ("0", {0}),
        ("0-3,8,10-11\n", {0, 1, 2, 3, 8, 10, 11}),
        ("8,0-3,2-5", {0, 1, 2, 3, 4, 5, 8}),  # overlapping and unsorted input merged
        ("0-15:2/4", {0, 1, 4, 5, 8, 9, 12, 13}),
        ("0-6:2/4", {0, 1, 4, 5}),
        ("3-3", {3}),
    ],
)
def test_parse_list(text: str, ids: set[int]) -> None:
    assert parse_list(text) == frozenset(ids)
    assert parse_cpulist(text) == frozenset(ids)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("3-1", "reversed"),
        ("0-65536", "past the last possible cpu"),
        ("9" * 5000, "not a cpu list"),
        ("0-" + "9" * 5000, "not a cpu list"),
        ("0x3", "not a cpu list"),
        ("0-3:0/4", "stride"),
        ("0-3:5/4", "stride"),
        ("N", "not a cpu list"),
        ("1,,2", "not a cpu list"),
        ("０", "not a cpu list"),  # fullwidth digit: int() would take it
    ],
)
def test_cpulist_ids_refuses(text: str, why: str) -> None:
    with pytest.raises(BoundError, match=why):
        parse_list(text)
    with pytest.raises(ParseError):
        parse_cpulist(text)


def test_cpulist_limit_is_the_possible_range() -> None:
    assert parse_list("0-7", limit=8) == frozenset(range(8))
    with pytest.raises(BoundError, match="past the last possible cpu 7"):
        parse_list("0-8", limit=8)


def test_cpulist_bombs_are_refused_or_linear() -> None:
    # A megabyte of ranges is refused by its length before any parsing.
    with pytest.raises(BoundError, match="bytes"):
        parse_list("0-65535," * (1 << 17))
    # The largest accepted text of repeated whole ranges is merged, then expanded once: each of
    # the ~8,000 parts would otherwise expand 65,536 ids (half a billion set insertions).
    text = ",".join(["0-65535"] * ((MAX_CPULIST_BYTES // 8) - 1))
    assert len(text) <= MAX_CPULIST_BYTES
    assert len(parse_list(text)) == 1 << 16
    # Distinct stride groups share one budget of ids.
    many = ",".join(f"{i}-65535:1/2" for i in range(5000))[:MAX_CPULIST_BYTES].rsplit(",", 1)[0]
    with pytest.raises(BoundError, match="too many cpus"):
        parse_list(many)


def test_cpulist_groups_are_a_policy() -> None:
    """Tuning refuses the group form (the kernel's interrupt files and irqbalance never print
    it); discovery and the manifest accept it."""
    assert parse_list("0-3", groups=False) == frozenset(range(4))
    with pytest.raises(ValueError, match="not a cpu list"):
        parse_list("0-15:2/4", groups=False)
    assert parse_list("0-15:2/4") == {0, 1, 4, 5, 8, 9, 12, 13}


@pytest.mark.parametrize(
    ("ids", "text"),
    [(set(), ""), ({5}, "5"), ({0, 1, 2, 8}, "0-2,8"), ({3, 1, 2, 7, 9, 8}, "1-3,7-9")],
)
def test_format_list(ids: set[int], text: str) -> None:
    assert format_list(ids) == text
    assert format_list(sorted(ids)) == text  # any iterable
    assert parse_list(text) == ids


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("00000000,0000ffff\n", set(range(16))),
        ("ff", set(range(8))),
        ("0", set()),
        ("1,00000000", {32}),
        ("80000000,00000001", {0, 63}),
    ],
)
def test_parse_mask(text: str, ids: set[int]) -> None:
    assert parse_mask(text) == ids
    assert parse_cpumask(text) == frozenset(ids)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "not a hex cpu mask"),
        ("0x1", "not a hex cpu mask"),
        ("ff,zz", "not a hex cpu mask"),
        ("f" * (MAX_CPULIST_BYTES + 1), "bytes"),
    ],
)
def test_parse_mask_refuses(text: str, why: str) -> None:
    with pytest.raises(BoundError, match=why):
        parse_mask(text)
    with pytest.raises(ParseError, match=why):
        parse_cpumask(text)


@pytest.mark.parametrize(
    ("text", "ids"),
    [("123456789", {0, 3, 7, 8, 9, 10, 13, 14, 16, 18, 22, 24, 25, 29, 32}), ("1,,2", {1, 4})],
)
def test_mask_word_width_is_a_policy(text: str, ids: set[int]) -> None:
    """Tuning takes the kernel's 32-bit words only; discovery reads the digits whatever the
    commas between them."""
    with pytest.raises(BoundError, match="not a hex cpu mask"):
        parse_mask(text)
    assert parse_mask(text, any_width=True) == ids
    assert parse_cpumask(text) == frozenset(ids)


def test_mask_limit_names_the_lowest_cpu_past_it() -> None:
    assert parse_mask("ff", limit=8) == frozenset(range(8))
    with pytest.raises(BoundError, match="cpu 9 in the mask is past the last possible cpu 7"):
        parse_mask("00000e00", limit=8)
    with pytest.raises(BoundError, match="past the last possible cpu 65535"):
        parse_mask("1," + ",".join(["00000000"] * 2048))


def test_format_mask_pads_to_the_words_asked() -> None:
    assert format_mask({0}) == "00000001"
    assert format_mask({0, 32, 33}) == "00000003,00000001"
    assert format_mask(set(), 2) == "00000000,00000000"
    assert format_mask({40}, 1) == "00000100,00000000"


@pytest.mark.parametrize(
    ("text", "kwargs", "value"),
    [("42\n", {}, 42), ("-1", {}, -1), (" 7 ", {"minimum": 0, "maximum": 7}, 7)],
)
def test_parse_decimal(text: str, kwargs: dict[str, int], value: int) -> None:
    assert parse_decimal(text, **kwargs) == value


@pytest.mark.parametrize(
    ("text", "kwargs", "why"),
    [
        ("9" * 5000, {}, "5000 digits"),
        ("9" * 21, {}, "21 digits"),
        ("1e3", {}, "not an integer"),
        ("٣", {}, "not an integer"),  # Arabic-Indic three: int() would take it
        ("", {}, "not an integer"),
        ("8", {"maximum": 7}, "above 7"),
        ("-2", {"minimum": -1}, "below -1"),
    ],
)
def test_parse_decimal_refuses(text: str, kwargs: dict[str, int], why: str) -> None:
    with pytest.raises(BoundError, match=why):
        parse_decimal(text, **kwargs)
    if not kwargs:
        with pytest.raises(ParseError):
            parse_int(text)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("H100 80GB HBM3", "H100 80GB HBM3"),
        ("GPU-\x1b[31mred", "GPU-\\x1b[31mred"),
        ("x\n  999 0 nvml", "x\\n  999 0 nvml"),
        ("a\rb\tc", "a\\rb\\tc"),
        ("\x7f\x9b", "\\x7f\\x9b"),  # DEL and the C1 CSI
        ("abc\u202edcba", "abc\\u202edcba"),  # right-to-left override (Trojan Source)
        ("\x00", "\\x00"),
        ("\u2028", "\\u2028"),
        ("café ü 日本", "café ü 日本"),
    ],
)
def test_printable(text: str, shown: str) -> None:
    assert printable(text) == shown
    assert printable(shown) == shown
