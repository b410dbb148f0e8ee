"""The shape every tuning subsystem has (tuned's plugins/base.py is the peer): the profile keys
it owns, parse its section, read the host, plan, write. Verify is not a method: it re-plans
with the same `plan`, so it cannot drift from apply.

A subsystem also declares the facts about its keys that the rest of the engine needs (the
journal, apply, explain ask the registry, plugins/__init__.py, which asks the key's owner), so
adding a subsystem touches no other module:

- `path_of(key)`: the one file an item key writes (the journal accepts an entry only at the
  path its key's owner names here); None for a key that writes no file.
- `file_keys`: keys whose journal original is a whole file, written atomically by apply with
  `file_text` and restored byte for byte ("" for a drop-in that did not exist: removed).
  `raw_keys`: further keys whose original is kept exactly as read (grubby's argument string).
- `atomic_files`: the files it replaces with Host.write_file_atomic, whose temporaries a
  killed run left behind are removed when the next run starts.
- `requirement(key)`: what writing a key needs (privilege.py); the default is the rule by the
  key's shape (a `section:option` key is a root-owned sysfs or /etc file). The engine asks
  the registry (explain, a refused write's hint); a subsystem's `plan` passes it to
  `value_item` (or to privilege.missing where it decides itself).
- `explained(key)`: for `mcpnode profiles explain`, the profile setting a key is (or is an
  item of) and the one file whose value is shown.

Everything below the abstract methods has a default, so the interface grows additively.

Also here: what the subsystems share to do so, the profile field checks (`err`,
`text_problem`, `token_list`, `module_list`) and the plan's common answers (`unusable`,
`same_cpus`).
"""

from __future__ import annotations

import functools
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from mcpnode.codec import cpus
from mcpnode.host import Host, HostReader
from mcpnode.tuning import paths, privilege
from mcpnode.tuning.errors import ProfileError
from mcpnode.tuning.facts import KeyFacts
from mcpnode.tuning.model import Action, HostState, PlanItem, Setting
from mcpnode.tuning.outcome import Outcome
from mcpnode.tuning.partition import CpuPartition
from mcpnode.tuning.read import Absent, Reading, Unreadable
from mcpnode.tuning.values import (
    Choice,
    Desired,
    Exact,
    Prefer,
    compare,
    describe,
    resolve,
    target,
)

MAX_VALUE_BYTES = 4096
TOKEN = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}\Z", re.ASCII)  # bbr, cubic, performance

# A host without GPU slices (no GPUs, or none with a NUMA node) has nothing to keep work off:
# moving every interrupt onto one housekeeping core there would only hurt.
NO_SLICES = "no GPU slices on this host: nothing to keep off, left as it is"
NO_PARTITION = "the GPU slices are not known to this run (no current manifest, no discovery)"


@dataclass
class SectionInput:
    """One profile file's section, as a subsystem parses it. `allowed`: the file's
    `allow_sensitive`; a subsystem adds to `used` the sensitive names it consumed that are not
    setting keys (kernel parameters), so the file's list can be checked to be exact."""

    file: str
    table: Mapping[str, Any]
    comments: Mapping[tuple[str, str], str]
    allowed: frozenset[str]
    used: set[str] = field(default_factory=set)

    def comment(self, section: str, key: str) -> str:
        return self.comments.get((section, key), "")


@dataclass
class StateDraft:
    """What read_state gathers, filled by each subsystem's `read` (HostState's fields)."""

    readings: dict[str, Reading] = field(default_factory=dict)
    available: dict[str, frozenset[str] | None] = field(default_factory=dict)
    modules: set[str] = field(default_factory=set)  # modules to look for in /sys/module
    cmdline: str | None = None
    policies: tuple[str, ...] | None = None
    found: dict[str, object] = field(default_factory=dict)


class Subsystem(ABC):
    """One tuning subsystem. `name` keys its entry in HostState.found; `section` and `options`
    are the profile table and keys it owns (`options` empty: every key of the section)."""

    name: ClassVar[str]
    section: ClassVar[str]
    options: ClassVar[tuple[str, ...]] = ()
    # verify counts a `skipped` item with a current value as drift (a PM QoS request that is
    # only held while the agent runs), where for others skipped means unverified.
    skipped_is_drift: ClassVar[bool] = False
    # Whether writing "" as a whole file removes it (a drop-in) or writes it empty.
    empty_file_removes: ClassVar[bool] = True
    # The kernel default and a note of each setting key, for `profiles explain`.
    key_facts: ClassVar[Mapping[str, KeyFacts]] = {}
    # Keys whose journal original is a whole file; keys kept exactly as read besides those.
    file_keys: ClassVar[frozenset[str]] = frozenset()
    raw_keys: ClassVar[frozenset[str]] = frozenset()
    # Files replaced with Host.write_file_atomic (their stale temporaries removed at start).
    atomic_files: ClassVar[tuple[str, ...]] = ()

    # The setting keys of ours (`cpu:max_latency_us`) and the pattern of our item keys
    # (`cpu:cstate:cpu3:state2`): what owns() answers unless a subsystem says otherwise.
    setting_keys: ClassVar[frozenset[str]] = frozenset()
    item_keys: ClassVar[re.Pattern[str] | None] = None

    def owns(self, key: str) -> bool:
        """Whether `key` (a profile setting's, a plan item's or a journal entry's) is ours."""
        return key in self.setting_keys or (
            self.item_keys is not None and self.item_keys.match(key) is not None
        )

    @abstractmethod
    def parse(self, section: SectionInput) -> list[Setting]:
        """The settings of this section's `options`. Raises ProfileError."""

    @abstractmethod
    def read(self, host: HostReader, setting: Setting, draft: StateDraft) -> None:
        """Read what planning `setting` needs into `draft`, through Host only."""

    @abstractmethod
    def plan(self, setting: Setting, state: HostState) -> list[PlanItem]:
        """Decide (pure) the items of `setting` on a host in `state`."""

    def path_of(self, key: str) -> str | None:
        """The one file item `key` of ours writes; None for a key that writes no file."""
        return None

    def facts(self, key: str) -> KeyFacts | None:
        """The kernel default and a note for `profiles explain` of a setting key of ours."""
        return self.key_facts.get(key)

    def granted(self, host: Host, key: str, path: str, new: str) -> str | None:
        """After writing `new`: the value the kernel actually took when it took less (it may
        reserve fewer huge pages than asked), else None. Raises HostError."""
        return None

    def requirement(self, key: str) -> privilege.Requirement:
        """What writing `key` needs; by default the rule by the key's shape."""
        return privilege.requirement(key)

    def explained(self, key: str) -> tuple[str, str | None] | None:
        """`key` as `mcpnode profiles explain` shows it: the profile setting it is (or is an
        item of) and the one file whose current value is shown (None: no single file); None
        when it cannot be explained (a key without `:` that writes no file)."""
        path = self.path_of(key)
        # An item key (`cpu:epp:cpu3`) is explained by its setting (`cpu:epp`), with its own
        # file; a setting for every CPU has no file of its own, and is explained when its
        # subsystem knows its facts.
        setting = ":".join(key.split(":")[:2]) if ":" in key else key
        if path is None and self.facts(setting) is None:
            return None
        return setting, path

    def modules_for(
        self, setting: Setting, items: Sequence[PlanItem], state: HostState
    ) -> list[tuple[str, str]]:
        """(module, why) to load before this setting can be satisfied."""
        return []

    def read_restore(self, host: HostReader, path: str) -> Reading | None:
        """A journaled path of ours read for its restore, or None: read as one value."""
        return None

    def write(self, host: Host, key: str, path: str, new: str, whole: bool) -> str | None:
        """Write one value that is not a whole file (`file_keys` are written by apply,
        atomically, with `file_text`). Returns the value before when it reads it itself, else
        None. Raises HostError."""
        host.write_text(path, new + "\n")
        return None

    def file_text(self, key: str, before: str, new: str) -> str:
        """The whole file to write for `new` over `before` (not for restores)."""
        return new

    def after_file_write(self, host: Host, key: str) -> None:
        """What makes a written file take effect (grub-mkconfig). Raises HostError."""
        return None

    def current_text(self, host: Host, key: str, path: str) -> str | None:
        """A whole-file key's current text before a restore ("" when absent). Raises HostError."""
        return host.read_optional(path, limit=1 << 16) or ""

    def refused_as_managed(self, key: str, outcome: Outcome) -> bool:
        """Whether a failed write is the kernel keeping the value its own (not a failure)."""
        return False

    def notes(self, host: Host, items: Sequence[PlanItem], done: Sequence[Outcome]) -> list[str]:
        """What the person who applied should know after the writes."""
        return []


# -- profile fields -------------------------------------------------------------------------


def err(file: str, key: str | None, detail: str, section: str | None = None) -> ProfileError:
    return ProfileError(file, key, detail, section)


def text_problem(value: str, limit: int = MAX_VALUE_BYTES) -> str | None:
    if len(value.encode("utf-8", errors="replace")) > limit:
        return f"longer than {limit} bytes"
    for ch in value:
        if ch == "\t":
            continue
        if ch == "\n" or ch == "\r":
            return "contains a newline (a sysctl takes one line)"
        if ch == "\0":
            return "contains a NUL byte"
        if not (" " <= ch <= "~"):
            return f"contains the character {ch!r} (only printable ASCII)"
    if not value.strip():
        return "is empty"
    return None


def token_list(file: str, section: str, key: str, what: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise err(file, key, f"{what} must be a non-empty list of names", section)
    out = []
    for item in value:
        if not isinstance(item, str) or not TOKEN.match(item):
            raise err(file, key, f"{what}: {str(item)[:60]!r} is not a name", section)
        out.append(item)
    return tuple(out)


def module_list(file: str, section: str, key: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise err(file, key, "must be a list of module names", section)
    out = []
    for item in value:
        if not isinstance(item, str) or not paths.MODULE_NAME.match(item):
            raise err(file, key, f"{str(item)[:60]!r} is not a module name", section)
        out.append(item)
    return tuple(out)


def one_of(
    section: SectionInput, name: str, option: str, choices: tuple[str, ...], key: str
) -> list[Setting]:
    """The setting `key` of section `name`'s `option` when given, which must be one of
    `choices` (an exact value); none when absent. Raises ProfileError."""
    if option not in section.table:
        return []
    value = section.table[option]
    if value not in choices:
        raise err(section.file, option, f"must be one of {', '.join(choices)}", name)
    note = section.comment(name, option)
    return [Setting(key, Exact(str(value)), section.file, note)]


def microseconds(section: SectionInput, name: str, option: str, key: str) -> list[Setting]:
    """The setting `key` of section `name`'s `option` when given: a latency in whole
    microseconds, 0 to 1 s (what PM QoS's cpu_dma_latency takes and cpuidle's exit latencies
    are counted in); none when absent. Raises ProfileError."""
    if option not in section.table:
        return []
    us = section.table[option]
    if isinstance(us, bool) or not isinstance(us, int) or not 0 <= us <= 1_000_000:
        raise err(section.file, option, "must be microseconds, 0 to 1000000", name)
    return [Setting(key, Exact.of(us), section.file, section.comment(name, option))]


# -- plan answers ----------------------------------------------------------------------------


def unusable(
    key: str, path: str, rule: str, reading: Reading | None, source: str
) -> PlanItem | None:
    """The item for a key whose current value cannot be compared, or None when it can."""
    if reading is None or isinstance(reading, Absent):
        why = reading.reason if reading is not None else f"{path} was not read"
        return PlanItem(key, path, rule, None, None, "unsupported", why, source)
    if isinstance(reading, Unreadable):
        # Never write a value whose original could not be saved (tuned skips these too).
        action: Action = "needs-privilege" if reading.denied else "skipped"
        return PlanItem(key, path, rule, None, None, action, reading.reason, source, unread=True)
    return None


def placement_gate(
    setting: Setting, found: object, missing: str, no_housekeeping: str, state: HostState
) -> list[PlanItem] | CpuPartition:
    """For a setting that places work on the housekeeping CPUs (`[irq] policy`, `rps`): no
    items when it is off, one saying why when it cannot be planned here (`found`, what was
    read, is not a tuple: `missing`; the partition is unknown, has no housekeeping CPUs:
    `no_housekeeping`, or no GPU slices), else the partition to place against."""
    key, src = setting.key, setting.source
    if not isinstance(setting.desired, Exact) or setting.desired.text == "off":
        return []
    if not isinstance(found, tuple):
        return [PlanItem(key, "", "housekeeping", None, None, "unsupported", missing, src)]
    part = state.partition
    if part is None:
        return [PlanItem(key, "", "housekeeping", None, None, "skipped", NO_PARTITION, src)]
    if not part.housekeeping:
        return [PlanItem(key, "", "housekeeping", None, None, "unsupported", no_housekeeping, src)]
    if not part.slices:
        return [PlanItem(key, "", "housekeeping", None, None, "unsupported", NO_SLICES, src)]
    return part


def same_cpus(a: str, b: str) -> bool:
    try:
        return cpus.parse_list(a, groups=False) == cpus.parse_list(b, groups=False)
    except ValueError:
        return False


def can_load(module: str, state: HostState) -> bool:
    return (
        state.live
        and state.modules is not None
        and module not in state.modules
        and privilege.missing(f"module:{module}", state.privileges) is None
    )


def value_item(
    key: str,
    path: str,
    setting: Setting,
    state: HostState,
    problem: Callable[[str, frozenset[str] | None, str | None], tuple[Action, str] | None]
    | None = None,
    requirement: privilege.Requirement | None = None,
) -> PlanItem:
    """The item of a one-file value (a sysctl, a sysfs setting): compared by values.compare,
    a preference list resolved against what the kernel offers. `problem(want, available,
    cmdline)`: why a value that differs is not to be written (THP set on the command line);
    `requirement`: what writing it needs (the subsystem's `requirement(key)`)."""
    reading = state.readings.get(path)
    if not isinstance(reading, str):
        found = unusable(key, path, describe(setting.desired), reading, setting.source)
        assert found is not None
        return found
    desired = setting.desired
    available = state.available.get(path)
    loadable = isinstance(desired, Prefer) and any(can_load(m, state) for m in desired.load)
    decide = _decide if len(reading) <= _DECIDE_CACHED_BYTES else _decide.__wrapped__
    rule, write, ok, reason = decide(reading, desired, available, loadable)
    if write is None:
        return PlanItem(key, path, rule, reading, None, "unsupported", reason, setting.source)
    if ok:
        return PlanItem(key, path, rule, reading, write, "ok", reason, setting.source)
    skip = problem(write, available, state.cmdline) if problem is not None else None
    if skip is not None:
        action, why = skip
        return PlanItem(key, path, rule, reading, write, action, why, setting.source)
    lacking = privilege.missing(key, state.privileges, requirement)
    if lacking is not None:
        return PlanItem(key, path, rule, reading, write, "needs-privilege", lacking, setting.source)
    return PlanItem(key, path, rule, reading, write, "set", reason, setting.source)


# Readings longer than this are decided uncached, so the cache holds at most 512 short values
# however large the files of a recorded root are (a sysfs value is a word or a few numbers).
_DECIDE_CACHED_BYTES = 256


@functools.lru_cache(maxsize=512)
def _decide(
    reading: str, desired: Desired, available: frozenset[str] | None, loadable: bool
) -> tuple[str, str | None, bool, str]:
    """(rule, value to write, satisfied, reason) of one reading against one desired value;
    the value is None when a preference has nothing acceptable here. Pure, so cached: a
    per-CPU key asks the same question of every CPU (192 identical answers on an 8-GPU host),
    and the answer depends on nothing but these arguments (all immutable)."""
    rule = describe(desired)
    if isinstance(desired, Prefer):
        choice: Choice = resolve(desired, available, can_load=loadable)
        if choice.value is None:
            return rule, None, False, choice.reason
        verdict = compare(reading, Exact(choice.value))
        return rule, choice.value, verdict.ok, f"{verdict.reason} ({choice.reason})"
    verdict = compare(reading, desired)
    return rule, target(reading, desired), verdict.ok, verdict.reason
