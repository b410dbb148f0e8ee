"""plan() is pure: tables of HostState in, PlanItems out."""

from __future__ import annotations

import pytest

from mcpnode.codec.record import replace
from mcpnode.tuning import paths
from mcpnode.tuning.model import HostState, Setting
from mcpnode.tuning.plan import plan, plan_restores
from mcpnode.tuning.privilege import Privileges
from mcpnode.tuning.profile import Profile
from mcpnode.tuning.read import Absent, Reading, Unreadable
from mcpnode.tuning.values import AtLeast, Desired, Exact, Prefer

ROOT = Privileges(0, (1 << 41) - 1)
CC = paths.sysctl_path(paths.TCP_CC)
BBR = Prefer(("bbr",), "cubic", ("tcp_bbr",))


def profile(*settings: tuple[str, Desired], modules: tuple[str, ...] = ()) -> Profile:
    return Profile(
        name="t",
        summary="",
        file="t.toml",
        chain=("t",),
        settings=tuple(Setting(k, d, "t.toml", "") for k, d in settings),
        modules=modules,
    )


def state(
    readings: dict[str, Reading],
    *,
    available: dict[str, frozenset[str] | None] | None = None,
    modules: frozenset[str] | None = frozenset(),
    privileges: Privileges = ROOT,
    cmdline: str | None = None,
    policies: tuple[str, ...] | None = None,
    live: bool = False,
) -> HostState:
    return HostState(readings, available or {}, modules, privileges, cmdline, policies, live)


def one(p: Profile, s: HostState) -> tuple[str, str | None, str]:
    (item,) = [i for i in plan(p, s).items if not i.is_module]
    return item.action, item.desired, item.reason


def test_basic_actions() -> None:
    sw = paths.sysctl_path("vm.swappiness")
    p = profile(("vm.swappiness", Exact.of(10)))
    assert one(p, state({sw: "60"}))[:2] == ("set", "10")
    assert one(p, state({sw: "10"}))[:2] == ("ok", "10")
    assert one(p, state({sw: Absent("no such file")}))[0] == "unsupported"
    assert one(p, state({sw: Unreadable("EACCES", denied=True)}))[0] == "needs-privilege"
    assert one(p, state({sw: Unreadable("EIO", denied=False)}))[0] == "skipped"
    assert one(p, state({sw: "60"}, privileges=Privileges(1000, 0)))[0] == "needs-privilege"


def test_at_least_multi_field() -> None:
    rmem = paths.sysctl_path("net.ipv4.tcp_rmem")
    p = profile(("net.ipv4.tcp_rmem", AtLeast((4096, 131072, 16777216))))
    assert one(p, state({rmem: "4096\t87380\t33554432"}))[:2] == ("set", "4096 131072 33554432")
    assert one(p, state({rmem: "4096\t131072\t33554432"}))[0] == "ok"


@pytest.mark.parametrize(
    ("available", "loaded", "live", "want", "module_action"),
    [
        (frozenset({"reno", "cubic", "bbr"}), frozenset(), True, "bbr", None),
        (frozenset({"reno", "cubic"}), frozenset(), True, "bbr", "set"),
        (frozenset({"reno", "cubic"}), frozenset({"tcp_bbr"}), True, "cubic", "ok"),
        (frozenset({"reno", "cubic"}), frozenset(), False, "cubic", "skipped"),
        (frozenset({"reno", "cubic"}), None, True, "cubic", "unsupported"),
    ],
)
def test_preference_with_module_loading(
    available: frozenset[str],
    loaded: frozenset[str] | None,
    live: bool,
    want: str,
    module_action: str | None,
) -> None:
    p = profile((paths.TCP_CC, BBR))
    s = state({CC: "cubic"}, available={CC: available}, modules=loaded, live=live)
    items = plan(p, s).items
    mods = [i for i in items if i.is_module]
    assert [i.action for i in mods] == ([module_action] if module_action else [])
    (cc,) = [i for i in items if i.key == paths.TCP_CC]
    assert cc.desired == want


def test_module_load_needs_cap_sys_module() -> None:
    p = profile(modules=("tcp_bbr",))
    (item,) = plan(p, state({}, live=True, privileges=Privileges(0, 0))).items
    assert item.action == "needs-privilege" and "CAP_SYS_MODULE" in item.reason
    plan_ = plan(p, state({}, live=True))
    assert [i.key for i in plan_.loads] == ["module:tcp_bbr"]
    assert plan_.writes == ()


def test_nothing_acceptable_is_unsupported() -> None:
    p = profile((paths.TCP_CC, Prefer(("bbr",), "cubic")))
    action, desired, reason = one(p, state({CC: "reno"}, available={CC: frozenset({"reno"})}))
    assert (action, desired) == ("unsupported", None) and "neither bbr" in reason


def test_thp() -> None:
    p = profile((paths.THP_KEY, Exact("never")))
    opts = frozenset({"always", "madvise", "never"})
    readings: dict[str, Reading] = {paths.THP_ENABLED: "always [madvise] never"}
    s = state(readings, available={paths.THP_ENABLED: opts})
    assert one(p, s)[:2] == ("set", "never")
    on_cmdline = replace(s, cmdline="root=/dev/sda transparent_hugepage=always quiet")
    action, _, reason = one(p, on_cmdline)
    assert action == "skipped" and "transparent_hugepage=always" in reason
    narrow = replace(s, available={paths.THP_ENABLED: frozenset({"always", "madvise"})})
    assert one(p, narrow)[0] == "unsupported"
    assert one(p, replace(s, readings={paths.THP_ENABLED: "always madvise [never]"}))[0] == "ok"


def test_governor_per_policy_and_none_in_vms() -> None:
    p = profile((paths.GOVERNOR_KEY, Prefer(("performance", "schedutil"))))
    g0, g1 = paths.governor_path("policy0"), paths.governor_path("policy4")
    s = state(
        {g0: "schedutil", g1: "performance"},
        available={g0: frozenset({"schedutil", "powersave"}), g1: frozenset({"performance"})},
        policies=("policy0", "policy4"),
    )
    items = plan(p, s).items
    assert [(i.key, i.action, i.desired) for i in items] == [
        ("cpu:governor:policy0", "ok", "schedutil"),
        ("cpu:governor:policy4", "ok", "performance"),
    ]
    (vm,) = plan(p, state({})).items
    assert vm.action == "unsupported" and "cpufreq" in vm.reason


def test_restores_for_keys_no_longer_set() -> None:
    sw, mc = paths.sysctl_path("vm.swappiness"), paths.sysctl_path("vm.max_map_count")
    p = profile(("vm.swappiness", Exact.of(10)))
    s = state({sw: "60", mc: "1048576"})
    entries = (("vm.swappiness", sw, "60"), ("vm.max_map_count", mc, "65530"))
    (restore,) = plan_restores(entries, plan(p, s), s)
    assert (restore.key, restore.action, restore.desired) == ("vm.max_map_count", "set", "65530")
    gone = state({sw: "60", mc: Absent("gone")})
    assert plan_restores(entries, plan(p, gone), gone) == ()


def test_counts() -> None:
    sw = paths.sysctl_path("vm.swappiness")
    p = profile(("vm.swappiness", Exact.of(10)), ("kernel.nope", Exact.of(1)))
    counts = plan(p, state({sw: "60", "/proc/sys/kernel/nope": Absent("x")})).counts()
    assert counts == {"set": 1, "ok": 0, "unsupported": 1, "needs-privilege": 0, "skipped": 0}
