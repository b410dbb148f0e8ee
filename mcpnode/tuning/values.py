"""Desired values and the one comparison apply, verify and rollback share (STYLE habit 5).

A profile value is one of:
- `Exact(text)`: `65535`, `"4096 131072 16777216"`, `"madvise"`. Fields are whitespace
  separated; the kernel prints multi-value sysctls with tabs (`tcp_rmem` reads
  `4096\t131072\t6291456`), so fields are compared one by one, as integers when both sides
  are integers (`065535` == `65535`), as strings otherwise.
- `AtLeast(fields)`: `{ min = 1048576 }` or `{ min = "4096 131072 16777216" }`. Satisfied when
  the current value has the same number of fields and *each* field is >= its minimum. The value
  to write raises only the fields that are too low (field-wise max), so a larger value is never
  lowered — the lesson of `vm.max_map_count`, which distros now ship at 1048576.
- `Prefer(prefer, fallback, load)`: the first of `prefer` the kernel lists as available, else
  `fallback` (`load` names modules to modprobe first when no preferred value is available).

Files that show a choice as `always [madvise] never` (sysfs `[selected]` enums) compare by the
bracketed token. Nothing here does I/O; `compare` is table-tested in
tests/tuning/test_tuning_values.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# At most 30 digits: the kernel prints no integer longer (u64 is 20), and int() of a hostile
# root's 5,000-digit "value" would raise (Python's 4300-digit limit); longer compares as text.
_INT = re.compile(r"[+-]?[0-9]{1,30}\Z", re.ASCII)
_SELECTED = re.compile(r"\[([^\[\]\s]+)\]")


@dataclass(frozen=True)
class Exact:
    """Write exactly this. `text` is normalised: fields joined by one space."""

    text: str

    @staticmethod
    def of(value: int | str) -> Exact:
        return Exact(" ".join(str(value).split()))


@dataclass(frozen=True)
class AtLeast:
    """Each field at least this (one field for a plain integer sysctl)."""

    fields: tuple[int, ...]


@dataclass(frozen=True)
class Prefer:
    """The first available of `prefer`, else `fallback`; `load` modules make `prefer` available."""

    prefer: tuple[str, ...]
    fallback: str | None = None
    load: tuple[str, ...] = ()


Desired = Exact | AtLeast | Prefer


@dataclass(frozen=True)
class Verdict:
    """The result of a comparison: whether the current value satisfies the desired one, and a
    sentence saying why (shown as the plan's reason and in verify's drift report)."""

    ok: bool
    reason: str


@dataclass(frozen=True)
class Choice:
    """A preference resolved against what the kernel offers.

    `value` is None when neither a preferred value nor the fallback is available. `loads` are
    the modules to load first (the value then assumes the load makes prefer[0] available; apply
    re-plans after loading, so a load that does not help falls back)."""

    value: str | None
    loads: tuple[str, ...]
    reason: str


def describe(desired: Desired) -> str:
    """The profile rule in a few characters: `65535`, `>= 1048576`, `bbr > cubic`."""
    if isinstance(desired, Exact):
        return desired.text
    if isinstance(desired, AtLeast):
        return ">= " + " ".join(str(f) for f in desired.fields)
    alternatives = list(desired.prefer) + ([desired.fallback] if desired.fallback else [])
    return " > ".join(alternatives)


def selected(text: str) -> str | None:
    """The bracketed choice of a sysfs enum file (`always [madvise] never` -> `madvise`), or
    None when the text shows no single bracketed choice."""
    found = _SELECTED.findall(text)
    return found[0] if len(found) == 1 else None


def fields(text: str) -> tuple[str, ...]:
    """The value's fields as the kernel means them: the selected token of an enum file, else
    the whitespace-separated fields."""
    choice = selected(text)
    if choice is not None:
        return (choice,)
    return tuple(text.split())


def restorable(text: str) -> str:
    """What to write back to restore a value read as `text`: the selected token of an enum file
    (writing `always [madvise] never` back would be refused), else the fields joined by a space."""
    return " ".join(fields(text))


def _field_equal(a: str, b: str) -> bool:
    if _INT.match(a) and _INT.match(b):
        return int(a) == int(b)
    return a == b


def compare(current: str, desired: Desired, available: frozenset[str] | None = None) -> Verdict:
    """Does `current` (the file's text) satisfy `desired`?

    `available` matters for `Prefer` only: the values the kernel offers. Without it a preference
    is satisfied by any of its preferred values (the fallback does not count)."""
    cur = fields(current)
    shown = " ".join(cur) if cur else "(empty)"
    if isinstance(desired, Exact):
        want = fields(desired.text)
        if len(cur) == len(want) and all(
            _field_equal(a, b) for a, b in zip(cur, want, strict=True)
        ):
            return Verdict(True, f"already {shown}")
        return Verdict(False, f"{shown} -> {' '.join(want)}")
    if isinstance(desired, AtLeast):
        return _compare_at_least(cur, desired)
    if available is None:
        if len(cur) == 1 and cur[0] in desired.prefer:
            return Verdict(True, f"{cur[0]} is preferred")
        return Verdict(False, f"{shown} is not one of {', '.join(desired.prefer)}")
    choice = resolve(desired, available, can_load=False)
    if choice.value is None:
        return Verdict(False, choice.reason)
    if len(cur) == 1 and cur[0] == choice.value:
        return Verdict(True, f"already {choice.value} ({choice.reason})")
    return Verdict(False, f"{shown} -> {choice.value} ({choice.reason})")


def _compare_at_least(cur: tuple[str, ...], desired: AtLeast) -> Verdict:
    want = desired.fields
    if len(cur) != len(want):
        return Verdict(False, f"has {len(cur)} fields, the minimum has {len(want)}")
    if not all(_INT.match(f) for f in cur):
        return Verdict(False, f"{' '.join(cur)} is not a number")
    low = [i for i, (c, w) in enumerate(zip(cur, want, strict=True)) if int(c) < w]
    if not low:
        return Verdict(True, f"{' '.join(cur)} >= {' '.join(str(w) for w in want)}")
    if len(want) == 1:
        return Verdict(False, f"{cur[0]} < minimum {want[0]}")
    which = ", ".join(f"field {i + 1} {cur[i]} < {want[i]}" for i in low)
    return Verdict(False, which)


def satisfies(current: str, desired: Desired, available: frozenset[str] | None = None) -> bool:
    """`compare(...).ok`: whether nothing needs to be written."""
    return compare(current, desired, available).ok


def target(current: str, desired: Exact | AtLeast) -> str:
    """The text to write so that `current` satisfies `desired`.

    For AtLeast: each field raised to its minimum, larger fields kept (never lowered). When the
    current value is not a comparable number (wrong field count, not an integer), the minimum."""
    if isinstance(desired, Exact):
        return desired.text
    cur = fields(current)
    if len(cur) == len(desired.fields) and all(_INT.match(f) for f in cur):
        return " ".join(str(max(int(c), w)) for c, w in zip(cur, desired.fields, strict=True))
    return " ".join(str(w) for w in desired.fields)


def resolve(pref: Prefer, available: frozenset[str] | None, *, can_load: bool) -> Choice:
    """Resolve a preference list against the kernel's available values.

    1. the first preferred value that is available;
    2. else, when `pref.load` names modules and `can_load`, prefer[0] after loading them;
    3. else the fallback, when available (or when availability is unknown);
    4. else None (nothing acceptable on this kernel).
    With `available` None (the kernel does not list them) the first preferred value is taken."""
    if available is None:
        return Choice(pref.prefer[0], (), "availability not listed by the kernel")
    for value in pref.prefer:
        if value in available:
            rank = "first choice" if value == pref.prefer[0] else "best available"
            return Choice(value, (), f"{rank}; available: {' '.join(sorted(available))}")
    if pref.load and can_load:
        mods = " ".join(pref.load)
        return Choice(pref.prefer[0], pref.load, f"after loading {mods}")
    wanted = ", ".join(pref.prefer)
    if pref.fallback is not None and pref.fallback in available:
        return Choice(pref.fallback, (), f"fallback: {wanted} not available")
    fallback = f" nor fallback {pref.fallback}" if pref.fallback else ""
    return Choice(None, (), f"neither {wanted}{fallback} available here")
