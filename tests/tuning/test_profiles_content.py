"""The shipped tuning profiles, read as plain TOML (not through the engine).

These guard what the files say: real sysctl names only, a comment with the why and the kernel
default on every value, includes that resolve, the test-only profile (tests/profiles/, never
shipped) limited to per-netns keys. When the engine is importable, it must accept every profile
too.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

# tomllib is 3.11+; tomli (the same parser) is a dependency on 3.10.
tomllib = importlib.import_module("tomllib" if sys.version_info >= (3, 11) else "tomli")

REPO = Path(__file__).resolve().parents[2]
PROFILES_DIR = REPO / "profiles"
# Profiles only the tests apply (inside a network namespace); not in profiles/, so the wheel
# (pyproject.toml's data-files: profiles/*.toml) does not install them on hosts.
TEST_PROFILES_DIR = REPO / "tests" / "profiles"
SHIPPED = ("base", "inference-latency", "inference-throughput")
TEST_ONLY = ("net-test",)
SHIPPED_FILES = sorted(PROFILES_DIR.glob("*.toml"))
PROFILE_FILES = sorted([*SHIPPED_FILES, *TEST_PROFILES_DIR.glob("*.toml")], key=lambda p: p.stem)

# A sysctl name: dot-separated segments of [a-z0-9_-] (fs.file-max has a dash), at least two.
SYSCTL_NAME = re.compile(r"^[a-z0-9_-]+(\.[a-z0-9_-]+)+$")

# Names that look plausible and do not exist (or no longer exist) in /proc/sys. Seed material
# and configs in the wild use them; a profile must never ship them.
BANNED_KEYS = {
    # There is no io_uring_enable(d): the real key is kernel.io_uring_disabled (6.6+).
    "kernel.io_uring_enable",
    "kernel.io_uring_enabled",
    # CFS knobs left /proc/sys in 5.13 (debugfs) and were removed or renamed with EEVDF (6.6).
    "kernel.sched_latency_ns",
    "kernel.sched_min_granularity_ns",
    "kernel.sched_wakeup_granularity_ns",
    # SO_REUSEPORT is a socket option, not a sysctl.
    "net.core.so_reuseport",
    "net.ipv4.tcp_reuseport",
    "net.core.reuseport",
}

# net.* sysctls that exist only in the initial network namespace (absent in a child netns,
# observed on 6.18): they must never appear in the netns test profile.
INIT_NETNS_ONLY = {
    "net.core.default_qdisc",
    "net.core.netdev_max_backlog",
    "net.core.busy_poll",
    "net.core.busy_read",
    "net.core.netdev_budget",
    "net.core.netdev_budget_usecs",
    "net.core.bpf_jit_enable",
    "net.core.bpf_jit_harden",
    "net.core.bpf_jit_kallsyms",
}

# Keys that only exist from a given kernel version on; on older kernels the engine reports them
# as unsupported instead of writing them.
VERSION_GATED = {"kernel.io_uring_disabled": (6, 6)}

# A TOML key line: a quoted key (dotted sysctl names must be quoted) or a bare key, then "=".
KEY_LINE = re.compile(r'^\s*("(?:[^"\\]|\\.)*"|[A-Za-z0-9_-]+)\s*=')
SECTION_LINE = re.compile(r"^\s*\[([^\[\]]+)\]\s*(#.*)?$")


def load(path: Path) -> dict[str, Any]:
    with path.open("rb") as fh:
        data: dict[str, Any] = tomllib.load(fh)
    return data


def by_name() -> dict[str, dict[str, Any]]:
    return {p.stem: load(p) for p in PROFILE_FILES}


def value_lines(path: Path) -> list[tuple[str, str, int]]:
    """(section, key, line index) for every key line outside [profile]."""
    section = ""
    found = []
    for index, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        header = SECTION_LINE.match(line)
        if header:
            section = header.group(1).strip()
            continue
        key = KEY_LINE.match(line)
        if key and section and section != "profile":
            found.append((section, key.group(1).strip('"'), index))
    return found


def comment_block_above(lines: list[str], index: int) -> list[str]:
    """The contiguous `#` lines directly above line `index`, top to bottom."""
    block: list[str] = []
    i = index - 1
    while i >= 0 and lines[i].lstrip().startswith("#"):
        block.insert(0, lines[i].strip())
        i -= 1
    return block


def test_every_shipped_profile_exists() -> None:
    stems = {p.stem for p in SHIPPED_FILES}
    missing = set(SHIPPED) - stems
    assert not missing, f"profiles missing from {PROFILES_DIR}: {sorted(missing)}"
    assert stems == set(SHIPPED), f"unexpected shipped profiles: {sorted(stems - set(SHIPPED))}"
    assert {p.stem for p in TEST_PROFILES_DIR.glob("*.toml")} == set(TEST_ONLY)


@pytest.mark.parametrize("path", PROFILE_FILES, ids=lambda p: p.stem)
def test_profile_header(path: Path) -> None:
    data = load(path)
    header = data.get("profile")
    assert isinstance(header, dict), f"{path.name}: no [profile] table"
    assert header.get("name") == path.stem, f"{path.name}: [profile].name must be the file stem"
    assert isinstance(header.get("summary"), str) and header["summary"].strip()
    include = header.get("include", [])
    assert isinstance(include, list) and all(isinstance(i, str) for i in include)
    sections = {"profile", "sysctl", "vm", "cpu", "modules", "irq", "storage"}
    assert set(data) <= sections, f"{path.name}: {set(data)}"


@pytest.mark.parametrize("path", PROFILE_FILES, ids=lambda p: p.stem)
def test_sysctl_keys_are_real_names(path: Path) -> None:
    for key in load(path).get("sysctl", {}):
        assert SYSCTL_NAME.match(key), f"{path.name}: {key!r} is not a valid sysctl name"
        assert key not in BANNED_KEYS, f"{path.name}: {key!r} does not exist in Linux"
        assert "io_uring_enable" not in key, f"{path.name}: {key!r}: the key is io_uring_disabled"


@pytest.mark.parametrize("path", PROFILE_FILES, ids=lambda p: p.stem)
def test_sysctl_value_forms(path: Path) -> None:
    """exact int or one-line string, {min = int or "a b c"}, or {prefer, fallback, load}."""
    for key, value in load(path).get("sysctl", {}).items():
        where = f"{path.name}: {key}"
        if isinstance(value, bool):
            pytest.fail(f"{where}: booleans are not sysctl values; write 0 or 1")
        elif isinstance(value, int):
            assert value >= 0 or key == "kernel.io_uring_group", f"{where}: negative value"
        elif isinstance(value, str):
            assert value.strip() and "\n" not in value, f"{where}: empty or multi-line value"
        elif isinstance(value, dict) and set(value) == {"min"}:
            floor = value["min"]
            if isinstance(floor, str):  # field-wise minimum of a multi-value sysctl
                assert floor.split() and all(f.isdigit() for f in floor.split()), where
            else:
                assert isinstance(floor, int) and not isinstance(floor, bool), where
        elif isinstance(value, dict) and "prefer" in value:
            assert set(value) <= {"prefer", "fallback", "load"}, f"{where}: {sorted(value)}"
            prefer = value["prefer"]
            assert isinstance(prefer, list) and prefer, f"{where}: empty prefer list"
            assert all(isinstance(p, str) and p for p in prefer), where
            assert isinstance(value.get("fallback", ""), str), where
            assert all(isinstance(m, str) for m in value.get("load", [])), where
        else:
            pytest.fail(f"{where}: unknown value form {value!r}")


@pytest.mark.parametrize("path", PROFILE_FILES, ids=lambda p: p.stem)
def test_every_value_has_why_and_default_comment(path: Path) -> None:
    """STYLE.md habit 11: the line right above each value names the kernel default."""
    lines = path.read_text(encoding="utf-8").splitlines()
    for section, key, index in value_lines(path):
        where = f"{path.name}:{index + 1}: [{section}] {key}"
        block = comment_block_above(lines, index)
        assert block, f"{where}: no comment above the value"
        assert "default" in block[-1].lower(), f"{where}: line above must state the default"
        assert any("why" in c.lower() for c in block), f"{where}: comment must say why"


@pytest.mark.parametrize("path", PROFILE_FILES, ids=lambda p: p.stem)
def test_line_scan_sees_every_parsed_key(path: Path) -> None:
    """The comment check above is only as good as its line scan: it must see every key."""
    data = load(path)
    parsed = {
        (section, key) for section, table in data.items() if section != "profile" for key in table
    }
    scanned = {(section, key) for section, key, _ in value_lines(path)}
    assert scanned == parsed


def test_includes_resolve_without_cycles() -> None:
    profiles = by_name()

    def walk(name: str, chain: tuple[str, ...]) -> None:
        assert name in profiles, f"include {name!r} (via {' -> '.join(chain)}) is not shipped"
        assert name not in chain, f"include cycle: {' -> '.join((*chain, name))}"
        for child in profiles[name]["profile"].get("include", []):
            walk(child, (*chain, name))

    for name in profiles:
        walk(name, ())


@pytest.mark.parametrize("name", ["inference-latency", "inference-throughput"])
def test_inference_profiles_include_base(name: str) -> None:
    assert "base" in by_name()[name]["profile"]["include"]


def test_base_includes_nothing() -> None:
    assert by_name()["base"]["profile"].get("include", []) == []


@pytest.mark.parametrize("name", ["inference-latency", "inference-throughput"])
def test_overrides_never_undercut_a_base_floor(name: str) -> None:
    """An at-least floor in base is a promise; an include-child must not set an exact value
    below it (later wins, so it would silently lower the key)."""
    profiles = by_name()
    base = profiles["base"]["sysctl"]
    for key, value in profiles[name]["sysctl"].items():
        floor = base.get(key)
        if isinstance(floor, dict) and "min" in floor and isinstance(value, int):
            assert value >= floor["min"], f"{name}: {key}={value} is below base's min"


def test_net_test_profile_is_per_netns_only() -> None:
    """Applied for real inside `unshare --net`: only keys that live in the child netns."""
    data = by_name()["net-test"]
    assert set(data) == {"profile", "sysctl"}
    assert data["profile"].get("include", []) == []
    keys = set(data["sysctl"])
    assert keys == {
        "net.core.somaxconn",
        "net.ipv4.tcp_congestion_control",
        "net.ipv4.tcp_notsent_lowat",
        "net.ipv4.ip_local_port_range",
    }
    assert not keys & INIT_NETNS_ONLY
    cc = data["sysctl"]["net.ipv4.tcp_congestion_control"]
    assert "bbr" in cc["prefer"] and cc["fallback"] == "cubic"


def test_docs_table_lists_every_shipped_key() -> None:
    doc = (REPO / "docs" / "tuning.md").read_text(encoding="utf-8")
    for path in SHIPPED_FILES:
        for section, key, _ in value_lines(path):
            assert f"`{key}`" in doc, f"docs/tuning.md does not list [{section}] {key}"


def kernel_version() -> tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", os.uname().release)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


@pytest.mark.live
@pytest.mark.skipif(
    not Path("/proc/sys/kernel").is_dir(), reason="no /proc/sys on this machine (not Linux?)"
)
@pytest.mark.parametrize("path", PROFILE_FILES, ids=lambda p: p.stem)
def test_keys_exist_on_this_kernel(path: Path) -> None:
    """Read-only: every key is a file under this machine's /proc/sys (version gates aside)."""
    for key in load(path).get("sysctl", {}):
        gate = VERSION_GATED.get(key)
        if gate and kernel_version() < gate:
            continue
        proc = Path("/proc/sys", *key.split("."))
        assert proc.is_file(), f"{path.name}: {key} is not in /proc/sys on {os.uname().release}"


@pytest.mark.live
@pytest.mark.skipif(
    not Path("/sys/kernel/mm/transparent_hugepage/enabled").is_file(),
    reason="this kernel has no transparent hugepages (/sys/kernel/mm/transparent_hugepage)",
)
def test_thp_value_is_a_choice_this_kernel_offers() -> None:
    offered = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().replace("[", " ")
    choices = offered.replace("]", " ").split()
    for path in PROFILE_FILES:
        thp = load(path).get("vm", {}).get("transparent_hugepage")
        if thp is not None:
            assert thp in choices, f"{path.name}: transparent_hugepage={thp!r} not in {choices}"


ENGINE = "mcpnode.tuning.profile"


def engine_available() -> bool:
    try:
        return importlib.util.find_spec(ENGINE) is not None
    except ModuleNotFoundError:
        return False


@pytest.mark.skipif(
    not engine_available(), reason=f"{ENGINE} is not importable yet (tuning engine not built)"
)
@pytest.mark.parametrize(
    ("name", "directory"),
    [*((n, PROFILES_DIR) for n in SHIPPED), *((n, TEST_PROFILES_DIR) for n in TEST_ONLY)],
)
def test_engine_accepts_shipped_profile(name: str, directory: Path, tmp_path: Path) -> None:
    """The engine loads each profile from its directory against an empty temp root (no local
    profiles to shadow it) and keeps every key, includes resolved."""
    from mcpnode.host import Host
    from mcpnode.tuning.profile import load_profile

    with Host(tmp_path) as host:
        profile = load_profile(name, host, system_dir=directory)
    assert profile.name == name
    chain = [name]
    for included in by_name()[name]["profile"].get("include", []):
        chain.insert(0, included)
    assert list(profile.chain) == chain
    for member in chain:
        for key in load(directory / f"{member}.toml").get("sysctl", {}):
            setting = profile.setting(key)
            assert setting is not None, f"engine's {name} lost {key} (from {member})"
            assert "default" in setting.comment.lower(), f"{name}: {key}: comment not kept"


@pytest.mark.skipif(
    not engine_available(), reason=f"{ENGINE} is not importable yet (tuning engine not built)"
)
def test_engine_lets_latency_override_base(tmp_path: Path) -> None:
    """Later wins: inference-latency's vm.swappiness = 1 replaces base's 10."""
    from mcpnode.host import Host
    from mcpnode.tuning.profile import load_profile
    from mcpnode.tuning.values import Exact

    with Host(tmp_path) as host:
        profile = load_profile("inference-latency", host, system_dir=PROFILES_DIR)
    setting = profile.setting("vm.swappiness")
    assert setting is not None
    assert setting.desired == Exact("1")
    assert setting.source.endswith("inference-latency.toml")
