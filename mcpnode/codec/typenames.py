"""typing's names that mcpnode's classes need at run time, without importing typing.

Every mcpnode command imports Host's values (host/types.py, named tuples) and the protocols the
readers are typed against. On Python 3.11 `import typing` also imports re, enum, contextlib and
functools: about 8 ms of a `topo` run's start on a quiet 2-core VM, more than hwloc's whole
`lstopo` run on a small sysfs dump. To the type checker both names here *are* typing's (the
imports under TYPE_CHECKING); at run time:

- `NamedTuple` turns the class statement into `collections.namedtuple` as typing's own
  NamedTupleMeta does (CPython 3.11 Lib/typing.py): fields from the annotations in order,
  defaults from the class attributes of those names, every other attribute (methods, the
  docstring, the qualified name) copied onto the tuple class, and the same TypeErrors and
  AttributeErrors for what typing refuses. tests/codec/test_typenames.py holds the two side by
  side.
- `Protocol` is `object`: a protocol that is not `runtime_checkable` exists for the type checker
  alone (isinstance() against one raises TypeError), so a plain base class behaves the same for
  every use mcpnode makes of one. The runtime-checkable roles (host/roles.py) import typing's.
"""

from __future__ import annotations

from collections import namedtuple

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy reads it the same)
if TYPE_CHECKING:
    from typing import Any
    from typing import NamedTuple as NamedTuple
    from typing import Protocol as Protocol
else:
    Protocol = object

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
            with_default = [field for field in fields if field in ns]
            for i, field in enumerate(fields):
                before = [f for f in fields[:i] if f in ns]
                if field not in ns and before:
                    raise TypeError(
                        f"Non-default namedtuple field {field} cannot follow default field"
                        f"{'s' if len(before) > 1 else ''} {', '.join(before)}"
                    )
            defaults = [ns[field] for field in with_default]
            cls = namedtuple(name, fields, defaults=defaults, module=ns["__module__"])
            cls.__annotations__ = cls.__new__.__annotations__ = dict(annotations)
            for key, value in ns.items():
                if key in _PROHIBITED:
                    raise AttributeError("Cannot overwrite NamedTuple attribute " + key)
                if key not in _SPECIAL and key not in fields:
                    setattr(cls, key, value)
            return cls

    class NamedTuple(metaclass=_NamedTupleMeta):
        _root = True
