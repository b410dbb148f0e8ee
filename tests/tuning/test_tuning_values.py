"""The one comparison (values.compare), table-tested, plus properties of at-least and
preference resolution."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpnode.tuning.values import (
    AtLeast,
    Desired,
    Exact,
    Prefer,
    compare,
    describe,
    fields,
    resolve,
    restorable,
    satisfies,
    selected,
    target,
)

BBR = Prefer(("bbr3", "bbr"), "cubic", ("tcp_bbr",))

# (current as the kernel prints it, desired, available, satisfied?)
CASES: list[tuple[str, Desired, frozenset[str] | None, bool]] = [
    # integers
    ("4096", Exact.of(4096), None, True),
    ("4096", Exact.of(65535), None, False),
    ("065535", Exact.of(65535), None, True),
    ("-1", Exact.of(-1), None, True),
    ("+5", Exact.of(5), None, True),
    ("4294967295", Exact.of(4294967295), None, True),
    # multi-value: whitespace normalised, field by field
    ("4096\t131072\t6291456", Exact.of("4096 131072 6291456"), None, True),
    ("4096 131072 6291456", Exact.of("4096  131072\t6291456"), None, True),
    ("32768\t60999", Exact.of("1024 65535"), None, False),
    ("4096\t131072", Exact.of("4096 131072 6291456"), None, False),
    ("", Exact.of("0"), None, False),
    # strings
    ("fq_codel", Exact.of("fq"), None, False),
    ("fq", Exact.of("fq"), None, True),
    ("0x10", Exact.of("16"), None, False),  # hex is a string here, not a number
    # [selected] enum files
    ("always [madvise] never", Exact.of("madvise"), None, True),
    ("always madvise [never]", Exact.of("madvise"), None, False),
    ("[always] madvise never", Exact.of("always"), None, True),
    # at least: one field
    ("65530", AtLeast((1048576,)), None, False),
    ("1048576", AtLeast((1048576,)), None, True),
    ("2147483642", AtLeast((1048576,)), None, True),
    ("-1", AtLeast((0,)), None, False),
    ("abc", AtLeast((1,)), None, False),
    # at least: field by field
    ("4096\t131072\t33554432", AtLeast((4096, 131072, 16777216)), None, True),
    ("4096\t87380\t33554432", AtLeast((4096, 131072, 16777216)), None, False),
    ("4096 131072", AtLeast((4096, 131072, 16777216)), None, False),
    # preference lists against what the kernel offers
    ("bbr", BBR, frozenset({"reno", "cubic", "bbr"}), True),
    ("cubic", BBR, frozenset({"reno", "cubic", "bbr"}), False),
    ("bbr", BBR, frozenset({"reno", "cubic", "bbr", "bbr3"}), False),
    ("cubic", BBR, frozenset({"reno", "cubic"}), True),
    ("reno", BBR, frozenset({"reno"}), False),  # nothing acceptable available
    ("bbr", BBR, None, True),  # availability unknown: any preferred value is fine
    ("cubic", BBR, None, False),
]


@pytest.mark.parametrize(("current", "desired", "available", "ok"), CASES)
def test_compare_table(
    current: str, desired: Desired, available: frozenset[str] | None, ok: bool
) -> None:
    verdict = compare(current, desired, available)
    assert verdict.ok is ok, verdict.reason
    assert verdict.reason
    assert satisfies(current, desired, available) is ok


@pytest.mark.parametrize(
    ("current", "desired", "written"),
    [
        ("65530", AtLeast((1048576,)), "1048576"),
        ("2000000", AtLeast((1048576,)), "2000000"),
        ("4096\t87380\t33554432", AtLeast((4096, 131072, 16777216)), "4096 131072 33554432"),
        ("garbage", AtLeast((4096, 131072, 16777216)), "4096 131072 16777216"),
        ("4096", Exact.of(65535), "65535"),
    ],
)
def test_target_raises_only_what_is_low(current: str, desired: AtLeast, written: str) -> None:
    assert target(current, desired) == written


@pytest.mark.parametrize(
    ("available", "can_load", "value", "loads"),
    [
        (frozenset({"reno", "cubic", "bbr"}), False, "bbr", ()),
        (frozenset({"reno", "cubic", "bbr", "bbr3"}), False, "bbr3", ()),
        (frozenset({"reno", "cubic"}), True, "bbr3", ("tcp_bbr",)),
        (frozenset({"reno", "cubic"}), False, "cubic", ()),
        (frozenset({"reno"}), False, None, ()),
        (None, False, "bbr3", ()),
    ],
)
def test_resolve(
    available: frozenset[str] | None, can_load: bool, value: str | None, loads: tuple[str, ...]
) -> None:
    choice = resolve(BBR, available, can_load=can_load)
    assert (choice.value, choice.loads) == (value, loads)


def test_selected_restorable_describe() -> None:
    assert selected("always [madvise] never") == "madvise"
    assert selected("[a] [b]") is None
    assert selected("plain") is None
    assert restorable("always [madvise] never") == "madvise"
    assert restorable("4096\t131072\t6291456\n") == "4096 131072 6291456"
    assert fields("  a\tb  ") == ("a", "b")
    assert describe(Exact.of(" 1  2 ")) == "1 2"
    assert describe(AtLeast((1, 2))) == ">= 1 2"
    assert describe(BBR) == "bbr3 > bbr > cubic"


# -- properties ------------------------------------------------------------------------------

ints = st.integers(min_value=-(2**63), max_value=2**64 - 1)
field_lists = st.lists(ints, min_size=1, max_size=4)
seps = st.text(alphabet=" \t", min_size=1, max_size=3)
names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=8)


@given(field_lists, st.data())
def test_exact_ignores_whitespace_and_leading_zeros(values: list[int], data: st.DataObject) -> None:
    shown = []
    for v in values:
        zeros = "0" * data.draw(st.integers(0, 2)) if v >= 0 else ""
        shown.append(zeros + str(v))
    text = "".join(s + data.draw(seps) for s in shown).rstrip() + "\n"
    assert satisfies(text, Exact.of(" ".join(map(str, values))))


@given(field_lists, field_lists)
def test_at_least_target_satisfies_and_never_lowers(current: list[int], minimum: list[int]) -> None:
    text = "\t".join(map(str, current))
    want = AtLeast(tuple(minimum))
    written = target(text, want)
    assert satisfies(written, want)
    if len(current) == len(minimum):
        assert all(int(w) >= c for w, c in zip(written.split(), current, strict=True))
        ok = all(c >= m for c, m in zip(current, minimum, strict=True))
        assert satisfies(text, want) is ok
        if ok:
            assert fields(written) == fields(text)  # nothing to raise: written as it was
    else:
        assert not satisfies(text, want)


@given(
    st.lists(names, min_size=1, max_size=4, unique=True),
    st.frozensets(names, max_size=6),
    st.one_of(st.none(), names),
)
def test_resolution_is_the_first_available_preference(
    prefer: list[str], available: frozenset[str], fallback: str | None
) -> None:
    pref = Prefer(tuple(prefer), fallback)
    choice = resolve(pref, available, can_load=False)
    first = next((p for p in prefer if p in available), None)
    if first is not None:
        assert choice.value == first
    elif fallback is not None and fallback in available:
        assert choice.value == fallback
    else:
        assert choice.value is None
    if choice.value is not None:
        assert satisfies(choice.value, pref, available)


@given(st.text(max_size=40), st.sampled_from([Exact.of("x"), AtLeast((1, 2)), BBR]))
def test_compare_never_raises(current: str, desired: Desired) -> None:
    verdict = compare(current, desired, frozenset({"bbr"}))
    assert isinstance(verdict.ok, bool) and verdict.reason
