"""codec/typenames.py's run-time NamedTuple against typing.NamedTuple: the same class body under
each base gives the same tuple class (fields, defaults, annotations, docstring, names, methods,
behaviour) and the same refusals; and host/types.py's classes are the shim's."""

from __future__ import annotations

import pickle
import typing
from typing import Any

import pytest

from mcpnode.codec import typenames
from mcpnode.host import types

BODIES = {
    "plain": '''
class Point(NamedTuple):
    """A point."""

    x: int
    y: int
''',
    "defaults_and_methods": '''
class Read(NamedTuple):
    """Records read."""

    records: tuple
    truncated: bool = False
    overwritten: int = 0

    def to_json(self):
        return {"records": list(self.records), "truncated": self.truncated}

    @property
    def count(self):
        return len(self.records)

    LIMIT = 5
''',
    "no_fields": """
class Empty(NamedTuple):
    pass
""",
}


def _make(source: str, base: Any) -> Any:
    env: dict[str, Any] = {"NamedTuple": base, "__name__": "tests.codec.sample"}
    # Compiled without this file's `from __future__ import annotations`, as host/types.py is:
    # typing would turn string annotations into ForwardRefs (a compile each), the shim keeps them.
    exec(compile(source, "<sample>", "exec", dont_inherit=True), env)
    (cls,) = [v for k, v in env.items() if isinstance(v, type) and k != "NamedTuple"]
    return cls


@pytest.mark.parametrize("name", sorted(BODIES))
def test_same_class_as_typing(name: str) -> None:
    ours = _make(BODIES[name], typenames.NamedTuple)
    theirs = _make(BODIES[name], typing.NamedTuple)
    assert ours is not theirs and issubclass(ours, tuple) and ours.__mro__[1:] == (tuple, object)
    for attr in ("_fields", "_field_defaults", "__annotations__", "__doc__", "__qualname__"):
        assert getattr(ours, attr) == getattr(theirs, attr), attr
    assert ours.__module__ == theirs.__module__ == "tests.codec.sample"
    assert ours.__new__.__annotations__ == theirs.__new__.__annotations__
    own = sorted(k for k in vars(theirs) if not k.startswith("__"))
    assert sorted(k for k in vars(ours) if not k.startswith("__")) == own
    if ours._fields:
        values = tuple(range(len(ours._fields)))
        a, b = ours(*values), theirs(*values)
        assert repr(a) == repr(b) and a == b == values and hash(a) == hash(values)
        assert a._asdict() == b._asdict()
        assert a._replace(**{ours._fields[0]: 9}) == b._replace(**{ours._fields[0]: 9})
        assert sorted([ours(*reversed(values)), a]) == sorted([values[::-1], values])
        assert a.__getnewargs__() == b.__getnewargs__() == values
        assert ours._make(values) == theirs._make(values) and type(ours._make(values)) is ours
        for bad in ("make", "replace"):
            errors: list[str] = []
            for cls in (theirs, ours):
                with pytest.raises((TypeError, ValueError)) as err:
                    if bad == "make":
                        cls._make((*values, 0))
                    else:
                        cls(*values)._replace(nope=1)
                errors.append(f"{err.type.__name__}: {err.value}")
            assert errors[0] == errors[1], bad
        for attr in ("__new__", "_make", "_replace", "__repr__", "_asdict"):
            assert getattr(ours, attr).__doc__ == getattr(theirs, attr).__doc__, attr
        assert [getattr(ours, f).__doc__ for f in ours._fields] == [
            getattr(theirs, f).__doc__ for f in theirs._fields
        ]
    if "records" in ours._fields:
        a, b = ours(("x",)), theirs(("x",))
        assert a == b and a.to_json() == b.to_json() and a.count == b.count == 1
        assert ours.LIMIT == theirs.LIMIT == 5


@pytest.mark.parametrize(
    ("source", "error"),
    [
        ("class Bad(NamedTuple):\n    a: int = 1\n    b: int\n", TypeError),
        ("class Bad(NamedTuple):\n    a: int = 1\n    b: int = 2\n    c: int\n", TypeError),
        (
            "class Bad(NamedTuple):\n    a: int\n    def _asdict(self):\n        return {}\n",
            AttributeError,
        ),
        ("class Bad(NamedTuple):\n    a: int\n    __slots__ = ()\n", AttributeError),
    ],
)
def test_same_refusals_as_typing(source: str, error: type[Exception]) -> None:
    with pytest.raises(error) as theirs:
        _make(source, typing.NamedTuple)
    with pytest.raises(error) as ours:
        _make(source, typenames.NamedTuple)
    assert str(ours.value) == str(theirs.value)


def test_host_values_are_the_shims_tuples() -> None:
    entry = types.Entry("cpu0", True, False)
    assert isinstance(entry, tuple) and entry == ("cpu0", True, False)
    assert sorted([entry, types.Entry("b", False, True)]) == [("b", False, True), entry]
    assert types.KmsgRead(("r",)) == (("r",), False, 0, 0, False)
    assert types.CommandResult(("x",), False, None, "", "").to_json()["reason"] is None
    assert types.Entry.__doc__ is not None and "directory entry" in types.Entry.__doc__
    assert types.Entry.__module__ == "mcpnode.host.types"
    assert pickle.loads(pickle.dumps(entry)) == entry  # found again by module and name


def test_without_the_c_field_getter_the_same_tuples() -> None:
    """An interpreter without `_collections._tuplegetter`: properties over itemgetter, as
    collections falls back to; fields still read, and are still read-only."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['_collections'] = None\n"
        "from mcpnode.codec.typenames import NamedTuple\n"
        "class P(NamedTuple):\n"
        "    x: int\n"
        "    y: int = 2\n"
        "p = P(1)\n"
        "assert (p.x, p.y, p, type(P.x)) == (1, 2, (1, 2), property)\n"
        "try:\n"
        "    p.x = 5\n"
        "except AttributeError:\n"
        "    print('read-only', 'collections' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "read-only False\n"
