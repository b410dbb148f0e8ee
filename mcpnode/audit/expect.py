"""Expected inventory: what a node of its kind must have (GPU count and model, NVLinks per GPU,
PCIe generation and width per GPU, RDMA NICs and their rate, NUMA nodes, a minimum driver), so
a node that lost a GPU from both sysfs and NVML FAILs on its own, not only when a fleet report
compares it with its neighbours.

The expectation is an `[expect]` table (docs/config.md): in the agent's configuration, or in
the file given to `mcpnode audit --expect FILE`, which `mcpnode expect --write FILE` writes
from a known-good host. Without `--expect`, the audit reads the `[expect]` table of
/etc/mcpnode/mcpnode.toml under the root when there is one. Every key is optional; a key not
given checks nothing. Parsing is strict: an unknown key or a value of the wrong type is an
error naming the file and the key.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from mcpnode.audit.context import AuditContext
from mcpnode.audit.expectation import Expectation, ExpectError
from mcpnode.audit.model import Evidence, Finding, Status, skipped
from mcpnode.codec import toml_bounded
from mcpnode.codec.toml_bounded import TomlRejected
from mcpnode.errors import HostError, PathNotFound, SymlinkLoop, TooLarge, Untrusted
from mcpnode.host import HostReader
from mcpnode.topology.model import Gpu, Topology

CONFIG_PATH = "/etc/mcpnode/mcpnode.toml"
MAX_EXPECT_BYTES = 1 << 20
MAX_RATE_GBPS = 100_000
__all__ = ["ExpectError", "Expectation", "check", "collect", "parse_expect_file", "parse_table"]

# key: (type, check, what it must be)
_INT_KEYS = {
    "gpu_count": (0, 1024),
    "nvlinks_per_gpu": (0, 36),
    "pcie_gen": (1, 7),
    "pcie_width": (1, 32),
    "nic_count": (0, 1024),
    "numa_nodes": (1, 1024),
}
_VERSION = re.compile(r"[0-9]{1,9}(\.[0-9]{1,9}){0,3}\Z")


def parse_table(table: object, file: str, prefix: str = "expect") -> Expectation:
    """An `[expect]` table (already parsed TOML) -> Expectation. Raises ExpectError."""
    if not isinstance(table, dict):
        raise ExpectError(file, prefix, f"must be a table ([{prefix}]), not {type(table).__name__}")
    known = [f.name for f in fields(Expectation)]
    values: dict[str, Any] = {}
    for key, value in table.items():
        where = f"{prefix}.{key}"
        if key not in known:
            raise ExpectError(file, where, f"unknown key (keys of [{prefix}]: {', '.join(known)})")
        if key in _INT_KEYS:
            lo, hi = _INT_KEYS[key]
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise ExpectError(file, where, f"must be an integer {lo}..{hi}, not {value!r}")
        elif key == "nic_rate_gbps":
            # TOML has nan and inf, and every comparison with nan is false: a rate that checks
            # nothing. The fastest port shipped is 800 Gb/s (XDR); MAX_RATE_GBPS leaves room.
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or not 0 < value <= MAX_RATE_GBPS
            ):
                raise ExpectError(
                    file,
                    where,
                    f"must be a positive number, at most {MAX_RATE_GBPS} (Gb/s), not {value!r}",
                )
            value = float(value)
        elif key == "gpu_model":
            if not isinstance(value, str) or not value.strip() or len(value) > 128:
                raise ExpectError(file, where, f"must be NVML's product name, not {value!r}")
        elif key == "driver_min" and (not isinstance(value, str) or not _VERSION.match(value)):
            raise ExpectError(file, where, f"must be a version such as '550.54', not {value!r}")
        values[key] = value
    return Expectation(**values)


def parse_expect_file(text: str, file: str) -> Expectation:
    """A TOML file holding an `[expect]` table (other tables are not read here: the agent's
    configuration itself will do). Raises ExpectError."""
    if len(text.encode("utf-8", "surrogateescape")) > MAX_EXPECT_BYTES:
        raise ExpectError(file, None, f"larger than {MAX_EXPECT_BYTES} bytes")
    try:
        doc = toml_bounded.loads(text)
    except TomlRejected as err:
        raise ExpectError(file, None, f"not valid TOML: {err}") from None
    if "expect" not in doc:
        raise ExpectError(file, "expect", "no [expect] table")
    return parse_table(doc["expect"], file)


def expect_lines(e: Expectation) -> list[str]:
    """`[expect]` with the keys `e` sets, as TOML that parse_table reads back to `e`."""
    lines = ["[expect]"]
    for f in fields(Expectation):
        value = getattr(e, f.name)
        if value is None:
            continue
        if isinstance(value, str):
            text = json.dumps(value)  # a TOML basic string: the same escapes as JSON's
        elif isinstance(value, float):
            text = repr(value)
        else:
            text = str(value)
        lines.append(f"{f.name} = {text}")
    return lines


def read_expect_text(host: HostReader, path: str) -> str:
    """The one reader of a file holding an `[expect]` table (`--expect FILE`, the root's
    mcpnode.toml): an expectation decides what the audit passes, so it is trusted as the agent's
    configuration is (Host.read_trusted: a regular file, not a symlink, root's or this euid's,
    not group/world-writable, in such directories up to `/`), bounded while read (a FIFO or a
    huge file is refused, never slurped), and strict UTF-8. Raises PathNotFound for a missing
    file and ExpectError, naming the file and why, for every other refusal."""
    try:
        data = host.read_trusted(path, MAX_EXPECT_BYTES)
    except PathNotFound:
        raise
    except TooLarge:
        raise ExpectError(path, None, f"larger than {MAX_EXPECT_BYTES} bytes") from None
    except (Untrusted, SymlinkLoop) as err:
        raise ExpectError(path, None, f"cannot be used: {err.detail}") from None
    except HostError as err:
        raise ExpectError(path, None, f"cannot be read: {err.detail}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ExpectError(path, None, f"not UTF-8 (byte {err.start})") from None


def load_expect_file(host: HostReader, path: str) -> Expectation:
    """`--expect FILE`: the file read through `host` (the live machine's `/`: the file is the
    operator's, not the audited root's) by read_expect_text, parsed strictly. Raises
    ExpectError, naming the file for a missing, untrusted or unreadable one too."""
    try:
        text = read_expect_text(host, path)
    except PathNotFound as err:
        raise ExpectError(path, None, f"cannot be read: {err.detail}") from None
    return parse_expect_file(text, path)


def expectation_of(host: HostReader, topo: Topology) -> Expectation:
    """What this (known-good) host has, as an expectation for hosts of its kind: GPU count and
    model, the fewest active NVLinks of a GPU, the lowest GPU PCIe generation and width, the
    RDMA NICs and their slowest ACTIVE port, the NUMA nodes, this driver as the minimum."""
    from mcpnode.audit.ib import rate_gbps, read_ports

    gpus = topo.gpus
    names = {g.nvml.name for g in gpus if g.nvml is not None}
    links = [g.nvml.active_links for g in gpus if g.nvml is not None and g.nvml.nvlinks]
    pcie = [gpu_link(g) for g in gpus]
    gens = [gen for gen, _ in pcie if gen is not None]
    widths = [w for _, w in pcie if w is not None]
    nics = [n for n in topo.nics if n.rdma_devices and not n.is_virtual_function]
    rates = [
        r
        for p in read_ports(host).ports
        if (p.state.text or "").strip().endswith("ACTIVE")
        and (r := rate_gbps(p.rate.text)) is not None
    ]
    nvml = topo.nvml
    return Expectation(
        gpu_count=len(gpus),
        gpu_model=next(iter(names)) if len(names) == 1 and None not in names else None,
        nvlinks_per_gpu=min(links) if links and len(links) == len(gpus) else None,
        pcie_gen=min(gens) if gens and len(gens) == len(gpus) else None,
        pcie_width=min(widths) if widths and len(widths) == len(gpus) else None,
        nic_count=len(nics),
        nic_rate_gbps=min(rates) if rates else None,
        numa_nodes=len(topo.numa_nodes),
        driver_min=nvml.driver_version if nvml is not None and nvml.available else None,
    )


EXPECT_SCHEMA = "mcpnode.expect/v1"


def expect_dict(e: Expectation) -> dict[str, Any]:
    """`[expect]` as data: read back from the very lines `expect_lines` writes, so the TOML and
    the JSON of one expectation agree."""
    from mcpnode.codec import toml_bounded

    table: dict[str, Any] = toml_bounded.loads("\n".join(expect_lines(e)) + "\n")["expect"]
    return table


def render_json(e: Expectation, source: str) -> str:
    """`mcpnode expect --format json`: {schema, source, expect}."""
    doc = {"schema": EXPECT_SCHEMA, "source": source, "expect": expect_dict(e)}
    return json.dumps(doc, indent=2) + "\n"


def render(e: Expectation, source: str) -> str:
    """The file `mcpnode expect` writes: a comment saying where it came from, then [expect]."""
    head = [
        f"# Expected inventory written by `mcpnode expect` from {source}.",
        "# Check a host against it: mcpnode audit --expect FILE (or paste the table into the",
        "# agent's /etc/mcpnode/mcpnode.toml). Keys: docs/config.md, [expect].",
        "",
    ]
    return "\n".join([*head, *expect_lines(e)]) + "\n"


@dataclass(frozen=True)
class ExpectFacts:
    expect: Expectation | None
    source: str | None  # where it came from
    error: str | None  # the [expect] table could not be used


def collect(host: HostReader, ctx: AuditContext) -> ExpectFacts:
    if ctx.expect is not None:
        return ExpectFacts(ctx.expect, ctx.expect_source, None)
    try:
        text = read_expect_text(host, CONFIG_PATH)
    except PathNotFound:
        return ExpectFacts(None, None, None)
    except ExpectError as err:
        return ExpectFacts(None, CONFIG_PATH, str(err))
    try:
        doc = toml_bounded.loads(text)
    except TomlRejected as err:
        return ExpectFacts(None, CONFIG_PATH, f"{CONFIG_PATH}: not valid TOML: {err}")
    if "expect" not in doc:
        return ExpectFacts(None, None, None)
    try:
        return ExpectFacts(parse_table(doc["expect"], CONFIG_PATH), CONFIG_PATH, None)
    except ExpectError as err:
        return ExpectFacts(None, CONFIG_PATH, str(err))


def _version(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    # At most 9 digits a part, ASCII only (driver versions and [expect] driver_min are text)
    m = re.match(r"([0-9]{1,9}(?:\.[0-9]{1,9})*)(?![0-9])", text)
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def check(facts: ExpectFacts, ctx: AuditContext) -> list[Finding]:
    if facts.error is not None:
        return [
            Finding(
                "expect.config",
                Status.FAIL,
                f"expected inventory not checked: {facts.error}",
                (Evidence(facts.source or CONFIG_PATH, facts.error),),
                "Fix the [expect] table (docs/config.md); `mcpnode expect` prints one from a "
                "known-good host",
            )
        ]
    e = facts.expect
    if e is None:
        return skipped(
            "expect.config",
            "expected inventory not checked: no expectation (`mcpnode audit --expect FILE`, "
            f"or an [expect] table in {CONFIG_PATH})",
            Evidence(CONFIG_PATH, "no [expect] table"),
            "Write one from a known-good host of this kind: `mcpnode expect --write FILE`",
        )
    src = facts.source or "[expect]"
    topo = ctx.topology
    out: list[Finding] = []
    if e.gpu_count is not None:
        out.append(_gpu_count(topo, ctx, e.gpu_count, src))
    if e.gpu_model is not None:
        out.append(_gpu_model(topo, e.gpu_model, src))
    if e.nvlinks_per_gpu is not None:
        out.append(_nvlinks(topo, e.nvlinks_per_gpu, src))
    if e.pcie_gen is not None or e.pcie_width is not None:
        out.append(_pcie(topo, e.pcie_gen, e.pcie_width, src))
    if e.nic_count is not None:
        nics = [n for n in topo.nics if n.rdma_devices and not n.is_virtual_function]
        out.append(
            _compare(
                "expect.nic.count",
                "RDMA NICs",
                len(nics),
                e.nic_count,
                src,
                ", ".join(n.rdma_devices[0] for n in nics) or "none",
            )
        )
    if e.numa_nodes is not None:
        out.append(
            _compare(
                "expect.numa.nodes",
                "NUMA nodes",
                len(topo.numa_nodes),
                e.numa_nodes,
                src,
                ", ".join(str(n.id) for n in topo.numa_nodes),
            )
        )
    if e.driver_min is not None:
        out.append(_driver(ctx.driver_version, e.driver_min, src))
    return out


def _verdict(
    fid: str, ok: bool, passed: str, failed: str, ev: tuple[Evidence, ...], remedy: str
) -> Finding:
    """The one way an expectation concludes: PASS with `passed`, or FAIL with `failed` and the
    remedy; the evidence is the same either way."""
    if ok:
        return Finding(fid, Status.PASS, passed, ev)
    return Finding(fid, Status.FAIL, failed, ev, remedy)


def _compare(fid: str, what: str, got: int, want: int, src: str, detail: str) -> Finding:
    ev = (
        Evidence(f"{src} ({fid.split('.', 1)[1]})", str(want)),
        Evidence(what, f"{got}: {detail}"),
    )
    return _verdict(
        fid,
        got == want,
        f"{got} {what}, as expected",
        f"{got} {what}, expected {want}",
        ev,
        f"Find what is missing (`mcpnode topo`, `dmesg`); drain the node until it has the {what} "
        "of its kind",
    )


def _gpu_count(topo: Topology, ctx: AuditContext, want: int, src: str) -> Finding:
    """The PCI functions and NVML must both count `want`. Without NVML only the PCI functions
    can be counted: they decide, and the finding says that NVML's count is missing and why
    (`gpu.nvml` FAILs on the reason itself)."""
    sysfs, nvml = ctx.gpu_count_sysfs, ctx.gpu_count_nvml
    if nvml is not None:
        counted = str(nvml)
        ok = sysfs == want and nvml == want
        passed = f"{want} GPUs, as expected"
        failed = f"{sysfs} on the PCI bus, {nvml} in NVML; expected {want}"
        gone = (
            "A GPU gone from the bus needs the node drained and power-cycled (check `dmesg | grep "
            "-i xid` and the BMC's event log); reseat or RMA it if it stays gone"
        )
    else:
        reason = (topo.nvml.reason if topo.nvml is not None else None) or "no NVML answer recorded"
        counted = f"not counted: NVML unavailable ({reason})"
        ok = sysfs == want
        passed = (
            f"{want} GPUs on the PCI bus, as expected; not counted in NVML (unavailable: see "
            "gpu.nvml)"
        )
        failed = f"{sysfs} on the PCI bus, expected {want} (not counted in NVML: unavailable)"
        gone = (
            "A GPU gone from the PCI bus needs the node drained and power-cycled (check `dmesg | "
            "grep -i xid` and the BMC's event log); reseat or RMA it if it stays gone"
        )
    ev = (
        Evidence(f"{src} (gpu_count)", str(want)),
        Evidence("PCI bus (NVIDIA class 0x0300/0x0302)", str(sysfs)),
        Evidence("nvmlDeviceGetCount", counted),
    )
    return _verdict("expect.gpu.count", ok, passed, failed, ev, gone)


def _per_gpu(
    topo: Topology, expected: Evidence, fact: str, value: Callable[[Gpu], tuple[str, bool]]
) -> tuple[tuple[Evidence, ...], str, bool]:
    """A per-GPU expectation: its evidence (the expectation, then `index=value` of every GPU),
    the GPUs that miss it (`GPU i: value`, or `no GPU`), and whether it holds (on every GPU,
    and there is at least one). `value` answers a GPU's value as text and whether it misses."""
    got = [(g.index, *value(g)) for g in topo.gpus]
    wrong = "; ".join(f"GPU {i}: {text}" for i, text, bad in got if bad)
    seen = ", ".join(f"{i}={text}" for i, text, _ in got) or "no GPU"
    return (expected, Evidence(fact, seen)), wrong or "no GPU", bool(got) and not wrong


def _gpu_model(topo: Topology, want: str, src: str) -> Finding:
    def model(g: Gpu) -> tuple[str, bool]:
        name = g.nvml.name if g.nvml is not None else None
        return name or "unknown (no NVML)", name != want

    ev, wrong, ok = _per_gpu(topo, Evidence(f"{src} (gpu_model)", want), "nvmlDeviceGetName", model)
    return _verdict(
        "expect.gpu.model",
        ok,
        f"every GPU is a {want}",
        f"GPU model not as expected ({want}): {wrong}",
        ev,
        "A different model (or no NVML answer) means a swapped board or a broken driver: check "
        "`nvidia-smi -L`",
    )


def _nvlinks(topo: Topology, want: int, src: str) -> Finding:
    def links(g: Gpu) -> tuple[str, bool]:
        n = g.nvml.active_links if g.nvml is not None else None
        return (str(n), n < want) if n is not None else ("unknown", True)

    ev, short, ok = _per_gpu(
        topo,
        Evidence(f"{src} (nvlinks_per_gpu)", str(want)),
        "nvmlDeviceGetNvLinkState (active)",
        links,
    )
    return _verdict(
        "expect.gpu.nvlinks",
        ok,
        f"{want} active NVLinks per GPU",
        f"fewer active NVLinks than the {want} expected: {short}",
        ev,
        "`nvidia-smi nvlink -s`; reset the GPUs or restart nvidia-fabricmanager; RMA the "
        "baseboard if links stay down",
    )


def _pcie(topo: Topology, gen: int | None, width: int | None, src: str) -> Finding:
    rows = []
    bad = []
    for g in topo.gpus:
        gen_max, width_now = gpu_link(g)
        gen_text = f"Gen{gen_max}" if gen_max else "generation unknown"
        width_text = f"x{width_now}" if width_now else "width unknown"
        rows.append(f"{g.index}={gen_text} {width_text}")
        if gen is not None and (gen_max is None or gen_max < gen):
            bad.append(f"GPU {g.index}: {gen_text}")
        if width is not None and (width_now is None or width_now < width):
            bad.append(f"GPU {g.index}: {width_text}")
    want = " ".join(x for x in (f"Gen{gen}" if gen else "", f"x{width}" if width else "") if x)
    ev = (
        Evidence(f"{src} (pcie_gen, pcie_width)", want),
        Evidence("GPU PCIe link (max generation, current width)", ", ".join(rows) or "no GPU"),
    )
    return _verdict(
        "expect.gpu.pcie",
        not bad and bool(rows),
        f"every GPU's link reaches {want}",
        f"GPU PCIe links below the expected {want}: {'; '.join(bad) or 'no GPU'}",
        ev,
        "Reseat the GPU (riser, cable), check the slot's generation in the BIOS",
    )


# PCIe generation by transfer rate per lane (sysfs `max_link_speed`, PCI-SIG base specs)
_GEN_OF_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def gpu_link(g: Gpu) -> tuple[int | None, int | None]:
    """(maximum generation, current width) of a GPU's link: NVML's (max = min(GPU, slot)), else
    sysfs's."""
    n = g.nvml
    gen = n.pcie_gen_max if n is not None else None
    width = n.pcie_width_current if n is not None else None
    if gen is None and g.link.max_speed_gts is not None:
        gen = _GEN_OF_GTS.get(round(g.link.max_speed_gts, 1))
    if width is None:
        width = g.link.current_width
    return gen, width


def _driver(have: str | None, want: str, src: str) -> Finding:
    ev = (Evidence(f"{src} (driver_min)", want), Evidence("driver", have or "unknown"))
    got, need = _version(have), _version(want)
    return _verdict(
        "expect.driver",
        got is not None and need is not None and got >= need,
        f"driver {have} >= {want}",
        f"driver {have or 'unknown'}, expected {want} or later",
        ev,
        f"Install NVIDIA driver {want} or later (and reboot, or reload the modules)",
    )
