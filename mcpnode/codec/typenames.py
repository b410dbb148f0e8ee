"""typing's names that mcpnode's classes need at run time, without importing typing.

Every mcpnode command imports Host's values (host/types.py, named tuples) and the protocols the
readers are typed against. On Python 3.11 `import typing` also imports re, enum, collections,
contextlib and functools, and `collections` alone is ~2 ms: together about 10 ms of a `topo`
run's start on a quiet 2-core VM, more than hwloc's whole `lstopo` run on a small sysfs dump.
To the type checker both names here *are* typing's (the imports under TYPE_CHECKING); at run
time:

- `NamedTuple` turns the class statement into the class `collections.namedtuple` makes, as
  typing's own NamedTupleMeta does (CPython 3.11 Lib/typing.py): fields from the annotations in
  order, defaults from the class attributes of those names, every other attribute (methods, the
  docstring, the qualified name) copied onto the tuple class, and the same TypeErrors and
  AttributeErrors for what typing refuses. The tuple class itself is built here, as
  Lib/collections/__init__.py builds it (the same `__new__`, `_make`, `_replace`, `_asdict`,
  `__repr__`, `__getnewargs__`, `__match_args__` and C field getters), so that importing Host
  does not import `collections`. tests/codec/test_typenames.py holds typing's and these side by
  side.
- `Protocol` is `object`: a protocol that is not `runtime_checkable` exists for the type checker
  alone (isinstance() against one raises TypeError), so a plain base class behaves the same for
  every use mcpnode makes of one. The runtime-checkable roles (host/roles.py) import typing's.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy reads it the same)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any
    from typing import NamedTuple as NamedTuple
    from typing import Protocol as Protocol
else:
    Protocol = object

try:
    # collections' own C field getter (a descriptor reading item i of the tuple)
    from _collections import _tuplegetter  # type: ignore[import-not-found]  # no stub
except ImportError:  # an interpreter without it: collections' own fallback
    from operator import itemgetter

    def _tuplegetter(index: int, doc: str) -> Any:
        return property(itemgetter(index), doc=doc)


# What a NamedTuple class body may not define, and what is not copied onto the tuple class
# (typing's _prohibited and _special).
_PROHIBITED = frozenset(
    {
        "__new__",
        "__init__",
        "__slots__",
        "__getnewargs__",
        "_fields",
        "_field_defaults",
        "_make",
        "_replace",
        "_asdict",
        "_source",
    }
)
_SPECIAL = frozenset({"__module__", "__name__", "__annotations__"})


def _tuple_class(
    typename: str, fields: tuple[str, ...], defaults: tuple[Any, ...], module: str
) -> type[tuple[Any, ...]]:
    """`collections.namedtuple(typename, fields, defaults=defaults, module=module)`'s class, for
    the field names a class statement can give (identifiers; typing refuses a leading `_`)."""
    for name in fields:
        if name.startswith("_"):
            raise ValueError(f"Field names cannot start with an underscore: {name!r}")
    fields = tuple(map(sys.intern, fields))
    count = len(fields)
    arg_list = ", ".join(fields) + ("," if count == 1 else "")
    repr_fmt = "(" + ", ".join(f"{name}=%r" for name in fields) + ")"
    tuple_new = tuple.__new__
    namespace: dict[str, Any] = {
        "_tuple_new": tuple_new,
        "__builtins__": {},
        "__name__": f"namedtuple_{typename}",
    }
    # One eval'd function with the fields as its parameters, as namedtuple makes it: the
    # fastest constructor a tuple subclass can have, and a real signature for keywords.
    new = eval(f"lambda _cls, {arg_list}: _tuple_new(_cls, ({arg_list}))", namespace)  # noqa: S307
    new.__name__ = "__new__"
    new.__doc__ = f"Create new instance of {typename}({arg_list})"
    if defaults:
        new.__defaults__ = defaults

    def _make(cls: type[tuple[Any, ...]], iterable: Iterable[Any]) -> tuple[Any, ...]:
        result = tuple_new(cls, iterable)
        if len(result) != count:
            raise TypeError(f"Expected {count} arguments, got {len(result)}")
        return result

    _make.__doc__ = f"Make a new {typename} object from a sequence or iterable"

    def _replace(self: Any, /, **kwds: Any) -> Any:
        result = self._make(map(kwds.pop, fields, self))
        if kwds:
            raise ValueError(f"Got unexpected field names: {list(kwds)!r}")
        return result

    _replace.__doc__ = f"Return a new {typename} object replacing specified fields with new values"

    def __repr__(self: tuple[Any, ...]) -> str:
        """Return a nicely formatted representation string"""
        return self.__class__.__name__ + repr_fmt % self

    def _asdict(self: Any) -> dict[str, Any]:
        """Return a new dict which maps field names to their values."""
        return dict(zip(self._fields, self, strict=False))  # namedtuple's zip

    def __getnewargs__(self: tuple[Any, ...]) -> tuple[Any, ...]:
        """Return self as a plain tuple.  Used by copy and pickle."""
        return tuple(self)

    methods: tuple[Callable[..., Any], ...] = (new, _make, _replace, __repr__, _asdict)
    for method in (*methods, __getnewargs__):
        method.__qualname__ = f"{typename}.{method.__name__}"
    body: dict[str, Any] = {
        "__doc__": f"{typename}({arg_list})",
        "__slots__": (),
        "_fields": fields,
        "_field_defaults": dict(zip(fields[count - len(defaults) :], defaults, strict=True)),
        "__new__": new,
        "_make": classmethod(_make),
        "_replace": _replace,
        "__repr__": __repr__,
        "_asdict": _asdict,
        "__getnewargs__": __getnewargs__,
        "__match_args__": fields,
    }
    for index, name in enumerate(fields):
        body[name] = _tuplegetter(index, sys.intern(f"Alias for field number {index}"))
    result: type[tuple[Any, ...]] = type(typename, (tuple,), body)
    result.__module__ = module
    return result


if not TYPE_CHECKING:

    class _NamedTupleMeta(type):
        def __new__(
            mcls, name: str, bases: tuple[type, ...], ns: dict[str, Any]
        ) -> type[tuple[Any, ...]]:
            if ns.get("_root", False):
                return super().__new__(mcls, name, bases, ns)  # the NamedTuple base itself
            if bases != (NamedTuple,):
                raise TypeError("can only inherit from a NamedTuple type and Generic")
            annotations = ns.get("__annotations__", {})
            fields = tuple(annotations)
            for i, field in enumerate(fields):
                before = [f for f in fields[:i] if f in ns]
                if field not in ns and before:
                    raise TypeError(
                        f"Non-default namedtuple field {field} cannot follow default field"
                        f"{'s' if len(before) > 1 else ''} {', '.join(before)}"
                    )
            defaults = tuple(ns[field] for field in fields if field in ns)
            cls = _tuple_class(name, fields, defaults, ns["__module__"])
            cls.__annotations__ = cls.__new__.__annotations__ = dict(annotations)
            for key, value in ns.items():
                if key in _PROHIBITED:
                    raise AttributeError("Cannot overwrite NamedTuple attribute " + key)
                if key not in _SPECIAL and key not in fields:
                    setattr(cls, key, value)
            return cls

    class NamedTuple(metaclass=_NamedTupleMeta):
        _root = True
