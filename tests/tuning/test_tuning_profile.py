"""Profiles: parsing, includes, locations, and hostile files rejected before any write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcpnode.host import Host
from mcpnode.tuning import keytypes
from mcpnode.tuning.errors import ProfileError
from mcpnode.tuning.profile import list_profiles, load_profile, parse_profile
from mcpnode.tuning.sensitive import sensitive_reason
from mcpnode.tuning.values import AtLeast, Exact, Prefer
from tests.support.tuningcli import run_cli
from tests.support.tuningroot import BASE_PROFILE, put, tree, write_profiles


@pytest.fixture
def host_dirs(tuning_root: Path, tuning_profiles: Path) -> tuple[Path, Path]:
    return tuning_root, tuning_profiles


def test_latency_merges_base_depth_first_later_wins(host_dirs: tuple[Path, Path]) -> None:
    root, profiles = host_dirs
    p = load_profile("latency", Host(root), profiles)
    assert p.chain == ("base", "latency")
    keys = [s.key for s in p.settings]
    # base's keys first (their first position kept), latency's value wins for somaxconn
    assert keys[:3] == ["vm.swappiness", "vm.max_map_count", "net.core.somaxconn"]
    somaxconn = p.setting("net.core.somaxconn")
    assert somaxconn is not None and somaxconn.desired == Exact("8192")
    assert somaxconn.source.endswith("latency.toml")
    assert p.setting("vm.max_map_count") == p.setting("vm.max_map_count")
    mmc = p.setting("vm.max_map_count")
    assert mmc is not None and mmc.desired == AtLeast((1048576,))
    cc = p.setting("net.ipv4.tcp_congestion_control")
    assert cc is not None and cc.desired == Prefer(("bbr",), "cubic", ("tcp_bbr",))
    swappiness = p.setting("vm.swappiness")
    assert (
        swappiness is not None and swappiness.comment == "Kernel default 60; keep the page cache."
    )
    assert p.setting("vm:transparent_hugepage") is not None
    assert p.setting("cpu:governor") is not None


def test_diamond_includes_are_not_cycles(tmp_path: Path, tuning_root: Path) -> None:
    root = tuning_root
    profiles = write_profiles(
        tmp_path / "p",
        {
            "a": '[profile]\ninclude = ["b", "c"]\n',
            "b": '[profile]\ninclude = ["d"]\n[sysctl]\n"vm.swappiness" = 1\n',
            "c": '[profile]\ninclude = ["d"]\n[sysctl]\n"vm.swappiness" = 2\n',
            "d": '[sysctl]\n"vm.swappiness" = 3\n"net.core.somaxconn" = 5\n',
        },
    )
    p = load_profile("a", Host(root), profiles)
    assert p.chain == ("d", "b", "c", "a")
    assert p.setting("vm.swappiness") == p.setting("vm.swappiness")
    s = p.setting("vm.swappiness")
    assert s is not None and s.desired == Exact("2")  # c comes after b


def test_local_profile_wins_and_is_listed(host_dirs: tuple[Path, Path]) -> None:
    root, profiles = host_dirs
    put(root, "etc/mcpnode/profiles/base.toml", '[profile]\nsummary = "local"\n')
    put(root, "etc/mcpnode/profiles/README", "not a profile")
    host = Host(root)
    assert load_profile("base", host, profiles).summary == "local"
    rows = {r.name: r for r in list_profiles(host, profiles)}
    assert set(rows) == {"base", "latency"}
    assert rows["base"].origin == "local" and rows["base"].shadows is not None
    assert rows["latency"].includes == ("base",)


def test_broken_profile_is_listed_with_its_error(host_dirs: tuple[Path, Path]) -> None:
    root, profiles = host_dirs
    (profiles / "bad.toml").write_text("[sysctl\n")
    rows = {r.name: r for r in list_profiles(Host(root), profiles)}
    assert rows["bad"].error is not None and "bad.toml" in rows["bad"].error
    assert rows["base"].error is None


def test_missing_profile_names_what_was_searched(host_dirs: tuple[Path, Path]) -> None:
    root, profiles = host_dirs
    with pytest.raises(ProfileError, match="no profile named 'nope'") as err:
        load_profile("nope", Host(root), profiles)
    assert str(profiles) in str(err.value)


# -- hostile profiles: rejected naming file and key, nothing written ------------------------

BIG = "x" * (1 << 16)  # over the 4096-byte value limit, under the 1 MiB file cap
HOSTILE: list[tuple[str, dict[str, str], str, str | None]] = [
    # (case, files, file named in the error, key named in the error)
    ("malformed", {"evil": '[sysctl\n"vm.swappiness" = 1\n'}, "evil", None),
    ("unknown-section", {"evil": "[bogus]\nx = 1\n"}, "evil", "bogus"),
    ("unknown-profile-key", {"evil": '[profile]\nowner = "me"\n'}, "evil", "owner"),
    ("dotdot", {"evil": '[sysctl]\n"net..core.somaxconn" = 1\n'}, "evil", "net..core.somaxconn"),
    ("slash", {"evil": '[sysctl]\n"net/core/somaxconn" = 1\n'}, "evil", "net/core/somaxconn"),
    ("absolute", {"evil": '[sysctl]\n"/etc/passwd" = 1\n'}, "evil", "/etc/passwd"),
    ("traversal", {"evil": '[sysctl]\n"../../etc/shadow" = 1\n'}, "evil", "../../etc/shadow"),
    ("nul", {"evil": '[sysctl]\n"vm.swap\\u0000piness" = 1\n'}, "evil", "vm.swap\0piness"),
    ("upper", {"evil": '[sysctl]\n"VM.Swappiness" = 1\n'}, "evil", "VM.Swappiness"),
    ("one-segment", {"evil": '[sysctl]\n"swappiness" = 1\n'}, "evil", "swappiness"),
    ("dash-segment", {"evil": '[sysctl]\n"kernel.-" = 1\n'}, "evil", "kernel.-"),
    ("underscore-segment", {"evil": '[sysctl]\n"vm._" = 1\n'}, "evil", "vm._"),
    ("leading-dash", {"evil": '[sysctl]\n"net.-core.x" = 1\n'}, "evil", "net.-core.x"),
    (
        "cycle",
        {"evil": '[profile]\ninclude = ["b"]\n', "b": '[profile]\ninclude = ["evil"]\n'},
        "b",
        "include",
    ),
    ("self-include", {"evil": '[profile]\ninclude = ["evil"]\n'}, "evil", "include"),
    ("missing-include", {"evil": '[profile]\ninclude = ["ghost"]\n'}, "evil", "include"),
    ("include-path", {"evil": '[profile]\ninclude = ["../x"]\n'}, "evil", "include"),
    ("float", {"evil": '[sysctl]\n"vm.swappiness" = 1.5\n'}, "evil", "vm.swappiness"),
    ("bool", {"evil": '[sysctl]\n"vm.swappiness" = true\n'}, "evil", "vm.swappiness"),
    ("array", {"evil": '[sysctl]\n"vm.swappiness" = [1, 2]\n'}, "evil", "vm.swappiness"),
    ("table", {"evil": '[sysctl]\n"vm.swappiness" = { max = 3 }\n'}, "evil", "vm.swappiness"),
    (
        "min-and-prefer",
        {"evil": '[sysctl]\n"vm.swappiness" = { min = 1, prefer = ["a"] }\n'},
        "evil",
        "vm.swappiness",
    ),
    (
        "prefer-unlisted",
        {"evil": '[sysctl]\n"vm.swappiness" = { prefer = ["1"] }\n'},
        "evil",
        "vm.swappiness",
    ),
    (
        "newline",
        {"evil": '[sysctl]\n"kernel.core_pattern" = "a\\nb"\n'},
        "evil",
        "kernel.core_pattern",
    ),
    (
        "multiline-string",
        {"evil": '[sysctl]\n"kernel.core_pattern" = """a\nb"""\n'},
        "evil",
        "kernel.core_pattern",
    ),
    (
        "64k-value",
        {"evil": f'[sysctl]\n"kernel.core_pattern" = "{BIG}"\n'},
        "evil",
        "kernel.core_pattern",
    ),
    ("empty", {"evil": '[sysctl]\n"kernel.core_pattern" = "  "\n'}, "evil", "kernel.core_pattern"),
    ("bad-module", {"evil": '[modules]\nload = ["../x"]\n'}, "evil", "load"),
    (
        "bad-thp",
        {"evil": '[vm]\ntransparent_hugepage = "sometimes"\n'},
        "evil",
        "transparent_hugepage",
    ),
    ("unknown-vm", {"evil": "[vm]\ndirty_ratio = 10\n"}, "evil", "dirty_ratio"),
    ("name-mismatch", {"evil": '[profile]\nname = "base"\n'}, "evil", "name"),
    ("not-utf8", {"evil": "[sysctl]\n# \udcff\n"}, "evil", None),
]


def _write(directory: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        data = text.encode("utf-8", errors="surrogateescape")
        (directory / f"{name}.toml").write_bytes(data)


@pytest.mark.parametrize(("case", "files", "culprit", "key"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_profile_rejected_with_zero_writes(
    tmp_path: Path,
    tuning_root: Path,
    case: str,
    files: dict[str, str],
    culprit: str,
    key: str | None,
) -> None:
    root = tuning_root
    profiles = write_profiles(tmp_path / "profiles", {"base": BASE_PROFILE})
    _write(profiles, files)
    before = tree(tmp_path)

    with pytest.raises(ProfileError) as err:
        load_profile("evil", Host(root), profiles)
    assert err.value.file == str(profiles / f"{culprit}.toml")
    assert err.value.key == key
    assert err.value.file in str(err.value)
    if key is not None:
        assert repr(key) in str(err.value)
    assert len(str(err.value)) < 2000  # a 1 MB value is not echoed back

    code, out, stderr = run_cli(
        "apply", "--profile", "evil", "--root", str(root), "--profiles-dir", str(profiles)
    )
    assert code == 2
    assert err.value.file in stderr and out == ""
    assert tree(tmp_path) == before, f"{case}: the tree changed"


@pytest.mark.parametrize("key", ["net.core", "net.ipv4.conf.all"])
def test_a_key_naming_a_directory_is_refused_in_one_line(
    tmp_path: Path, tuning_root: Path, key: str
) -> None:
    """`net.core` passes the name rules but is a directory of sysctls: apply (and its dry run)
    stops with one line naming file and key instead of planning it as "skipped" and exiting 0."""
    root = tuning_root
    put(root, "proc/sys/net/ipv4/conf/all/rp_filter", "1\n")
    profiles = write_profiles(tmp_path / "profiles", {"evil": f'[sysctl]\n"{key}" = 1\n'})
    argv = ("--profile", "evil", "--root", str(root), "--profiles-dir", str(profiles))
    for dry in ((), ("--dry-run",)):
        code, out, err = run_cli("apply", *argv, *dry)
        assert code == 2 and out == ""
        assert err.splitlines() == [
            f"mcpnode: ProfileError: {profiles / 'evil.toml'}: [sysctl] {key!r}: names the "
            f"directory /proc/sys/{key.replace('.', '/')}, not a sysctl: name one of the files "
            "in it"
        ]
    assert not (root / "var/lib/mcpnode/tuning-journal.json").exists()
    # verify reads it as any unreadable key: unknown (3), never compliant.
    code, out, _ = run_cli("verify", *argv)
    assert code == 3 and "is a directory" in out


# -- properties of the parser ---------------------------------------------------------------

segment = st.from_regex(r"[a-z0-9][a-z0-9_-]{0,11}", fullmatch=True)
# Valid keys: not the sensitive ones, which need allow_sensitive (tested apart).
sysctl_keys = (
    st.lists(segment, min_size=2, max_size=5)
    .map(".".join)
    .filter(lambda k: len(k) < 256 and sensitive_reason(k) is None)
)
# Valid values: an integer field a sysctl handler cannot take (over 64 bits) is refused.
value_text = (
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), min_size=1, max_size=40)
    .filter(str.strip)
    .filter(lambda t: keytypes.text_problem("generated.key", t) is None)
)
plain_values = st.one_of(
    st.integers(-(2**63), 2**63),
    value_text,
    st.lists(st.integers(0, 2**40), min_size=1, max_size=3).map(
        lambda v: {"min": " ".join(map(str, v))}
    ),
    st.integers(0, 2**40).map(lambda v: {"min": v}),
)


def _toml_value(value: object) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(sysctl_keys, plain_values, max_size=8))
def test_valid_profiles_round_trip(values: dict[str, object]) -> None:
    text = "[sysctl]\n" + "".join(
        f"{json.dumps(k)} = {_toml_value(v)}\n" for k, v in values.items()
    )
    doc = parse_profile(text, "gen.toml", "gen")
    assert [s.key for s in doc.settings] == list(values)
    for s, value in zip(doc.settings, values.values(), strict=True):
        if isinstance(value, dict):
            minimum = value["min"]
            expect = tuple(int(x) for x in str(minimum).split())
            assert s.desired == AtLeast(expect)
        else:
            assert s.desired == Exact(" ".join(str(value).split()))


@settings(max_examples=300)
@given(st.text(max_size=300))
def test_any_text_parses_or_raises_profile_error(text: str) -> None:
    try:
        parse_profile(text, "fuzz.toml", "fuzz")
    except ProfileError as err:
        assert "fuzz.toml" in str(err)


@given(
    st.text(min_size=1, max_size=30).filter(
        lambda k: (
            any(c not in "abcdefghijklmnopqrstuvwxyz0123456789_-." for c in k)
            or ".." in k
            or k.startswith(".")
            or k.endswith(".")
            or "." not in k
        )
    )
)
def test_keys_outside_the_alphabet_are_rejected(key: str) -> None:
    text = f"[sysctl]\n{json.dumps(key)} = 1\n"
    try:
        parse_profile(text, "k.toml", "k")
    except ProfileError as err:
        assert err.file == "k.toml"
        assert err.key is None or err.key == key  # None only when TOML itself refuses it
    else:
        raise AssertionError(f"{key!r} accepted")
