"""`@record`: value classes that cost little to define and to hold, for the topology model and
every layer's result types.

To the type checker a `@record` class is a dataclass (PEP 681 dataclass_transform, so mypy
checks its fields, immutability and constructors as such); at run time `record` builds the
same methods — `__init__`, `__repr__`, `__eq__`, `__hash__` (frozen), ordering (`order=True`),
read-only attributes (`frozen=True`) — and `__slots__`, with one `exec` per class, and that
only once the class has made _COMPILE_AFTER instances (the first ones are bound by the field
names, no compile: `_build` says why). dataclasses generates each method with its own exec and
imports inspect, ast and tokenize on the way, which cost more than the discovery of a small
host on every `mcpnode topo`; slots keep an 8,192-VF topology's memory down. `replace()` and
`fields()` are `dataclasses.replace` / `dataclasses.fields` for records (and fall back to
dataclasses for real dataclasses).
"""

from __future__ import annotations

from operator import attrgetter

# typing.TYPE_CHECKING without importing typing: on 3.11 `import typing` also imports re, enum,
# contextlib and functools, ~8 ms of a `topo` run's start on a quiet 2-core VM, for names the
# type checker alone reads (mypy treats this constant as it treats typing's).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar, overload

    _T = TypeVar("_T")
    _C = TypeVar("_C")
    _F = TypeVar("_F")

__all__ = ["FrozenRecordError", "fields", "is_record", "record", "replace"]


class FrozenRecordError(AttributeError):
    """An attempt to change a frozen record (dataclasses.FrozenInstanceError's counterpart)."""


class _Record:
    """What every record shares: repr, equality and hashing over the fields, in order. Only
    `__init__` is generated per class (one short exec): compiling every method per class, as
    dataclasses does, is what made importing this module slow."""

    __slots__ = ()
    __record_fields__: tuple[str, ...] = ()

    # The field values as a tuple, by operator.attrgetter made once per class (_build): one C
    # call, where a comprehension of getattr()s cost ~1.5 us a record; equality and hashing of
    # PCI addresses run tens of thousands of times per manifest build.
    __record_values__: Callable[[Any], tuple[Any, ...]] = staticmethod(lambda _self: ())

    def _values(self) -> tuple[Any, ...]:
        return self.__record_values__(self)

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__record_fields__)
        return f"{type(self).__qualname__}({inner})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, _Record)
        return self._values() == other._values()


class _FrozenRecord(_Record):
    __slots__ = ()

    def __hash__(self) -> int:
        return hash(self._values())

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenRecordError(f"cannot assign to field {name!r} of {type(self).__qualname__}")

    def __delattr__(self, name: str) -> None:
        raise FrozenRecordError(f"cannot delete field {name!r} of {type(self).__qualname__}")


class _OrderedRecord(_FrozenRecord):
    """Compared field by field, as a dataclass with order=True."""

    __slots__ = ()

    def _peer(self, other: object) -> tuple[Any, ...] | None:
        return (
            other._values()
            if isinstance(other, _Record) and other.__class__ is self.__class__
            else None
        )

    def __lt__(self, other: object) -> bool:
        peer = self._peer(other)
        return NotImplemented if peer is None else self._values() < peer

    def __le__(self, other: object) -> bool:
        peer = self._peer(other)
        return NotImplemented if peer is None else self._values() <= peer

    def __gt__(self, other: object) -> bool:
        peer = self._peer(other)
        return NotImplemented if peer is None else self._values() > peer

    def __ge__(self, other: object) -> bool:
        peer = self._peer(other)
        return NotImplemented if peer is None else self._values() >= peer


def _values_getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """A function of a record giving its field values as a tuple (attrgetter gives a bare value
    for one name, and wants at least one)."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        get = attrgetter(names[0])
        return lambda obj: (get(obj),)
    return lambda _obj: ()


def _build(cls: type[_C], frozen: bool, order: bool) -> type[_C]:
    """`cls` again, slotted, on the record base that fits, with a generated `__init__`."""
    # The class's own annotations, as dataclasses reads them (not inspect's, which would
    # import inspect: the cost this module avoids).
    names = tuple(cls.__dict__.get("__annotations__", {}))  # noqa: RUF063
    defaults = {n: cls.__dict__[n] for n in names if n in cls.__dict__}
    built: list[type] = []  # the class made below, for __init__ to find
    made = [0]  # instances made through the binder below
    nfields = len(names)
    setter = object.__setattr__ if frozen else setattr

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        # Two tiers. The first _COMPILE_AFTER instances bind their arguments here, by the
        # class's field names; the real __init__ is compiled after that and replaces this one
        # on the class. The compile (~130 us on a quiet 2-core VM) is most of what a record
        # class costs, and a command makes only some of the classes it imports, most of them
        # a few times (`topo` on a small host: 15 classes, 14 of them 18 times or fewer),
        # so a short run compiles almost none. Binding here costs ~2 us an instance more than
        # the compiled __init__, which pays for itself well before the class compiles. Any
        # call this does not bind as the compiled one would (a missing or unknown argument,
        # too many positional ones) is handed to the compiled one, which raises Python's
        # own TypeError for it.
        made[0] += 1
        if made[0] <= _COMPILE_AFTER and _bind(self, args, kwargs):
            return
        real = _compile_init(names, defaults, frozen)
        setattr(built[0], "__init__", real)  # noqa: B010 - mypy refuses the attribute form
        real(self, *args, **kwargs)

    def _bind(self: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Set every field from `args`, `kwargs` and the defaults; False (some fields may be
        set) when the call is not one the compiled __init__ would accept."""
        given = len(args)
        if given > nfields:
            return False
        for name, value in zip(names, args, strict=False):  # args may be fewer
            setter(self, name, value)
        used = 0
        for name in names[given:]:
            if name in kwargs:
                value = kwargs[name]
                used += 1
            elif name in defaults:
                value = defaults[name]
            else:
                return False
            setter(self, name, value)
        return used == len(kwargs)  # else a keyword names no field, or a positional one again

    body = {k: v for k, v in cls.__dict__.items() if k not in names}
    body.pop("__dict__", None)
    body.pop("__weakref__", None)
    # Private slots a class asks for (`__record_private__`), for what its methods compute once
    # and keep: not fields, so neither compared, hashed, printed nor passed to __init__.
    private = tuple(cls.__dict__.get("__record_private__", ()))
    body.update(
        __slots__=names + private,
        __match_args__=names,
        __record_fields__=names,
        __record_values__=staticmethod(_values_getter(names)),
        __init__=__init__,
    )
    base: type = _OrderedRecord if order else _FrozenRecord if frozen else _Record
    if not frozen:
        body["__hash__"] = None  # mutable and compared by value: unhashable, as a dataclass
    out = type(cls.__name__, (base,), body)
    out.__qualname__ = cls.__qualname__
    built.append(out)
    return out


# Instances of a record class made before its __init__ is compiled (_build).
_COMPILE_AFTER = 32


def _compile_init(names: tuple[str, ...], defaults: dict[str, Any], frozen: bool) -> Any:
    """A record's `__init__(self, <fields>)`, one short exec: each field set in order, through
    object.__setattr__ when the record is frozen, with the class's defaults."""
    params = ", ".join(f"{n}=_dflt_{n}" if n in defaults else n for n in names)
    setter = "    _set(self, {0!r}, {0})" if frozen else "    self.{0} = {0}"
    source = "\n".join(
        [f"def __init__(self, {params}):" if names else "def __init__(self):"]
        + ([setter.format(n) for n in names] or ["    pass"])
    )
    env: dict[str, Any] = {f"_dflt_{n}": v for n, v in defaults.items()}
    env["_set"] = object.__setattr__
    exec(source, env)  # noqa: S102 - source built above from the class's own field names
    return env["__init__"]


if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**_kwargs: object) -> Callable[[_F], _F]:
        """PEP 681's marker, for the type checker only: a no-op at run time (typing has it
        from 3.11 only, and typing_extensions is not a dependency)."""
        return lambda fn: fn


if TYPE_CHECKING:  # the overloads are the type checker's alone

    @overload
    def record(cls: type[_C], /) -> type[_C]: ...
    @overload
    def record(*, frozen: bool = False, order: bool = False) -> Callable[[type[_C]], type[_C]]: ...


@dataclass_transform()
def record(
    cls: type[_C] | None = None, /, *, frozen: bool = False, order: bool = False
) -> type[_C] | Callable[[type[_C]], type[_C]]:
    """`@record(frozen=True)`: the class as a slotted value type (module docstring). To the
    type checker a dataclass (PEP 681 dataclass_transform), with the same `frozen`/`order`."""
    if cls is not None:
        return _build(cls, frozen, order)

    def wrap(c: type[_C]) -> type[_C]:
        return _build(c, frozen, order)

    return wrap


def fields(obj: object) -> tuple[str, ...]:
    """The field names of a record class or instance (or a dataclass), in declaration order."""
    cls = obj if isinstance(obj, type) else type(obj)
    names: tuple[str, ...] | None = getattr(cls, "__record_fields__", None)
    if names is None:
        import dataclasses

        return tuple(f.name for f in dataclasses.fields(obj))  # type: ignore[arg-type]
    return names


def is_record(obj: object) -> bool:
    """A record instance (not the class)."""
    return hasattr(type(obj), "__record_fields__") and not isinstance(obj, type)


def replace(obj: _T, /, **changes: Any) -> _T:
    """A copy of record `obj` with `changes` (or dataclasses.replace for a real dataclass).
    Raises TypeError for a name that is not a field."""
    names: tuple[str, ...] | None = getattr(type(obj), "__record_fields__", None)
    if names is None:
        import dataclasses

        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    unknown = set(changes) - set(names)
    if unknown:
        raise TypeError(f"{type(obj).__qualname__} has no field {', '.join(sorted(unknown))}")
    values = {n: getattr(obj, n) for n in names}
    values.update(changes)
    return type(obj)(**values)
