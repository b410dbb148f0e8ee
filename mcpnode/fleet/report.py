"""Majorities and outliers across a fleet's manifests (pure: manifests in, a FleetReport out).

For each property: the value most hosts report is the majority (a plurality: the most common
value among hosts that report one); every host with another value, or with none where the
majority has one, is an outlier. When two or more values share the top count there is no
majority: the property is *split*, every group is listed and no host is singled out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mcpnode.fleet.load import Fleet, HostManifest, Unreadable, natural_key
from mcpnode.fleet.properties import PROPERTIES, Property, Value


@dataclass(frozen=True)
class GpuDiff:
    """One GPU of an outlier host whose value differs from the majority's same-index GPU."""

    index: int
    value: str
    fleet: str


@dataclass(frozen=True)
class Outlier:
    """A host that differs from the majority. `value` None: the host does not report the
    property. `gpus`: the differing GPUs when host and majority have the same GPU indices
    (otherwise empty, and the whole value tells the story)."""

    host: str
    value: str | None
    gpus: tuple[GpuDiff, ...] = ()


@dataclass(frozen=True)
class Group:
    """The hosts sharing one value (None: hosts not reporting the property)."""

    value: str | None
    hosts: tuple[str, ...]


@dataclass(frozen=True)
class PropertyReport:
    """One property across the fleet. `majority` is None when split or when no host reports
    the property; `groups` lists every value, most hosts first, the not-reporting last."""

    name: str
    title: str
    per_gpu: bool
    majority: str | None
    majority_hosts: int
    split: bool
    groups: tuple[Group, ...]
    outliers: tuple[Outlier, ...]


class MalformedManifest(Exception):
    """Internal: a manifest whose hash checks out but whose fields do not have the v1 shape."""


@dataclass(frozen=True)
class FleetReport:
    """`hosts`: the hosts whose manifests were compared, in natural order."""

    hosts: tuple[str, ...]
    unreadable: tuple[Unreadable, ...]
    properties: tuple[PropertyReport, ...]

    @property
    def outlier_hosts(self) -> tuple[str, ...]:
        names = {o.host for p in self.properties for o in p.outliers}
        return tuple(sorted(names, key=natural_key))

    @property
    def split_properties(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.properties if p.split)

    @property
    def ok(self) -> bool:
        """Nothing to look at: no outlier, no split property, no unreadable manifest."""
        return not (self.outlier_hosts or self.split_properties or self.unreadable)


def host_values(
    m: HostManifest, properties: Sequence[Property] = PROPERTIES
) -> dict[str, Value | None]:
    """Every property's value for one host. Raises MalformedManifest when a field is missing or
    of the wrong type (parse_manifest checks schema and hash, not the shape)."""
    try:
        return {p.name: p.extract(m.manifest) for p in properties}
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        # Hand-written or foreign manifests with a recomputed hash land here; the
        # ParseError of a bad cpulist is a ValueError too.
        raise MalformedManifest(
            f"{m.source}: not a v1 manifest ({type(err).__name__}: {err})"
        ) from err


def compare(fleet: Fleet, properties: Sequence[Property] = PROPERTIES) -> FleetReport:
    """The report for `fleet`. A manifest whose fields cannot be read joins the unreadable."""
    values: dict[str, dict[str, Value | None]] = {}
    unreadable = list(fleet.unreadable)
    for m in fleet.manifests:
        try:
            values[m.host] = host_values(m, properties)
        except MalformedManifest as err:
            unreadable.append(Unreadable(m.host, m.source, str(err)))
    reports = tuple(
        compare_property(p, [(h, v[p.name]) for h, v in values.items()]) for p in properties
    )
    return FleetReport(
        tuple(values),
        tuple(sorted(unreadable, key=lambda u: natural_key(u.host))),
        reports,
    )


def compare_property(prop: Property, values: Sequence[tuple[str, Value | None]]) -> PropertyReport:
    """Majority, groups and outliers of one property over (host, value) pairs."""
    by_text: dict[str, list[str]] = {}
    first: dict[str, Value] = {}
    missing: list[str] = []
    for host, value in values:
        if value is None:
            missing.append(host)
            continue
        by_text.setdefault(value.text, []).append(host)
        first.setdefault(value.text, value)
    ranked = sorted(by_text.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    groups = [Group(text, _sorted(hosts)) for text, hosts in ranked]
    if missing:
        groups.append(Group(None, _sorted(missing)))
    split = len(ranked) > 1 and len(ranked[0][1]) == len(ranked[1][1])
    if not ranked or split:
        return PropertyReport(
            prop.name, prop.title, prop.per_gpu, None, 0, split, tuple(groups), ()
        )
    majority = first[ranked[0][0]]
    outliers = [
        Outlier(host, None if value is None else value.text, _gpu_diffs(value, majority))
        for host, value in values
        if value is None or value.text != majority.text
    ]
    return PropertyReport(
        prop.name,
        prop.title,
        prop.per_gpu,
        majority.text,
        len(ranked[0][1]),
        False,
        tuple(groups),
        tuple(sorted(outliers, key=lambda o: natural_key(o.host))),
    )


def _gpu_diffs(value: Value | None, majority: Value) -> tuple[GpuDiff, ...]:
    """The GPUs that differ, when both sides list the same GPU indices."""
    if value is None or not value.per_gpu:
        return ()
    if [i for i, _ in value.per_gpu] != [i for i, _ in majority.per_gpu]:
        return ()
    return tuple(
        GpuDiff(i, mine, theirs)
        for (i, mine), (_, theirs) in zip(value.per_gpu, majority.per_gpu, strict=True)
        if mine != theirs
    )


def _sorted(hosts: list[str]) -> tuple[str, ...]:
    return tuple(sorted(hosts, key=natural_key))
