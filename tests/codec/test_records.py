"""`@record` classes (codec/record.py) behave as the dataclasses they stand in for: the same
equality, hashing, ordering, immutability, repr, `replace` and `fields`, with no field, one
field and several, and defaults."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest

from mcpnode.codec.record import FrozenRecordError, fields, record, replace
from mcpnode.host import Host
from mcpnode.topology.discover import discover
from mcpnode.topology.model import PciAddress, Problem
from tools.fixturegen import fixturegen


@record(frozen=True)
class _None:
    pass


@record(frozen=True)
class _One:
    a: int


@record(frozen=True, order=True)
class _Many:
    a: int
    b: str
    c: tuple[int, ...] = ()


@record
class _Mutable:
    a: int
    b: list[int]


@dataclasses.dataclass(frozen=True, order=True)
class _ManyDataclass:
    a: int
    b: str
    c: tuple[int, ...] = ()


def test_equality_and_hash_by_value() -> None:
    assert _None() == _None() and hash(_None()) == hash(_None())
    assert _One(1) == _One(1) and _One(1) != _One(2) and hash(_One(1)) == hash(_One(1))
    assert _Many(1, "x") == _Many(1, "x", ()) and _Many(1, "x") != _Many(1, "y")
    assert len({_Many(1, "x"), _Many(1, "x"), _Many(2, "x")}) == 2
    other: object = (1,)
    assert _One(1) != other and _One(1).__eq__(_Many(1, "x")) is NotImplemented


def test_ordering_is_the_dataclasses_ordering() -> None:
    values = [(a, b, c) for a, b, c in itertools.product((0, 1), ("x", "y"), ((), (1,)))]
    ours = sorted(_Many(*v) for v in reversed(values))
    theirs = sorted(_ManyDataclass(*v) for v in reversed(values))
    assert [(r.a, r.b, r.c) for r in ours] == [(d.a, d.b, d.c) for d in theirs]
    a, b = _Many(1, "x"), _Many(1, "y")
    assert (a < b, a <= b, a > b, a >= b) == (True, True, False, False)
    with pytest.raises(TypeError):
        _ = a < _ManyDataclass(1, "x")  # type: ignore[operator]


def test_frozen_and_mutable() -> None:
    one = _One(1)
    with pytest.raises(FrozenRecordError):
        one.a = 2  # type: ignore[misc]
    with pytest.raises(FrozenRecordError):
        del one.a
    m = _Mutable(1, [2])
    m.a = 3
    assert m == _Mutable(3, [2])
    with pytest.raises(TypeError):
        hash(m)


def test_repr_fields_and_replace() -> None:
    assert repr(_Many(1, "x")) == "_Many(a=1, b='x', c=())"
    assert fields(_Many) == ("a", "b", "c") and fields(_None()) == ()
    assert replace(_Many(1, "x"), b="y") == _Many(1, "y")
    with pytest.raises(TypeError, match="has no field d"):
        replace(_Many(1, "x"), d=1)


def test_model_records_as_dict_keys() -> None:
    addr = PciAddress(0, 0x1B, 0, 0)
    assert {addr: 1}[PciAddress(0, 0x1B, 0, 0)] == 1
    assert PciAddress(0, 0x1B, 0, 0) < PciAddress(0, 0x1B, 0, 1)
    assert Problem("c", "s", "d") == Problem("c", "s", "d")


@record(frozen=True)
class _Cached:
    a: int
    __record_private__ = ("_memo",)

    def doubled(self) -> int:
        memo: int | None = getattr(self, "_memo", None)
        if memo is None:
            memo = self.a * 2
            object.__setattr__(self, "_memo", memo)
        return memo


def test_a_private_slot_is_no_field() -> None:
    """What a method keeps in its private slot is not compared, hashed, printed or replaced."""
    warm, cold = _Cached(2), _Cached(2)
    assert warm.doubled() == 4
    assert warm == cold and hash(warm) == hash(cold) and repr(warm) == "_Cached(a=2)"
    assert fields(_Cached) == ("a",) and replace(warm, a=3).doubled() == 6


def test_topology_pci_finds_the_first_listed(tmp_path: Path) -> None:
    fixturegen.write_host(fixturegen.synthetic_host(4), tmp_path)
    with Host(tmp_path) as host:
        topo = discover(host)
    for dev in topo.pci_devices:
        assert topo.pci(dev.address) is dev
    assert topo.pci(PciAddress(0x7FFF, 0, 0, 0)) is None
    first = topo.pci_devices[0]
    doubled = replace(topo, pci_devices=(first, replace(first, driver="other")))
    assert doubled.pci(first.address) is first


# Calls a record's __init__ must answer as a function `(self, a, b, c=())` would: the bound
# fields, or Python's own TypeError.
_CALLS: list[tuple[tuple[object, ...], dict[str, object]]] = [
    ((1, "x"), {}),
    ((1, "x", (2,)), {}),
    ((1,), {"b": "x"}),
    ((), {"a": 1, "b": "x", "c": (3,)}),
    ((), {"c": (3,), "b": "x", "a": 1}),
    ((1, "x", (), 4), {}),  # too many positional arguments
    ((1,), {}),  # b missing
    ((), {}),  # a and b missing
    ((1, "x"), {"a": 2}),  # a twice
    ((1, "x"), {"d": 4}),  # no field d
    ((1,), {"b": "x", "d": 4}),
]


def _answer(cls: type, args: tuple[object, ...], kwargs: dict[str, object]) -> tuple[object, ...]:
    try:
        made = cls(*args, **kwargs)
    except TypeError as err:
        return ("TypeError", str(err))
    return (made.a, made.b, made.c)


def _fresh(frozen: bool) -> type:
    if frozen:

        @record(frozen=True)
        class Frozen:
            a: int
            b: str
            c: tuple[int, ...] = ()

        return Frozen

    @record
    class Mutable:
        a: int
        b: str
        c: tuple[int, ...] = ()

    return Mutable


def _is_compiled(cls: type) -> bool:
    return "_bind" not in cls.__init__.__code__.co_freevars  # type: ignore[misc]


def test_init_binds_before_and_after_it_is_compiled() -> None:
    """The first instances of a record class are bound without compiling its __init__ (a
    short run never pays the compile); later ones use the compiled one. The binder accepts
    exactly the calls the compiled __init__ accepts, with the same fields, and hands it every
    other call, so that the errors are Python's own."""
    from mcpnode.codec import record as record_mod

    def plain(a: object, b: object, c: object = ()) -> tuple[object, ...]:
        return (a, b, c)

    def plainly(args: tuple[object, ...], kwargs: dict[str, object]) -> object:
        try:
            return plain(*args, **kwargs)
        except TypeError:
            return "TypeError"

    for frozen in (True, False):
        compiled = _fresh(frozen)
        for _ in range(record_mod._COMPILE_AFTER):
            compiled(1, "x")
            assert not _is_compiled(compiled)
        compiled(1, "x")
        assert _is_compiled(compiled)
        reference = [_answer(compiled, a, k) for a, k in _CALLS]
        # Each call on a class of its own, so that the binder answers it (or hands it on).
        bound: list[tuple[object, ...]] = []
        for args, kwargs in _CALLS:
            cls = _fresh(frozen)
            bound.append(_answer(cls, args, kwargs))
            assert _is_compiled(cls) == (bound[-1][0] == "TypeError")
        assert bound == reference
        # What a plain function of the fields accepts, with the same values; refused alike.
        assert [a if a[0] != "TypeError" else a[0] for a in reference] == [
            plainly(a, k) for a, k in _CALLS
        ]
    # A frozen record stays frozen whichever tier made it.
    with pytest.raises(FrozenRecordError):
        _fresh(True)(1, "x").a = 2
