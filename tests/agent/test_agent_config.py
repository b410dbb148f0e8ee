"""The agent's configuration (docs/config.md): every validation error names the file and the
exact key; the shipped example parses to the defaults; `mcpnode config check` / `show` exit
0/65/66; `show` output reads back to the same configuration (a property, over random configs)."""

from __future__ import annotations

import importlib
import ipaddress
import json
import os
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import get_args

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from mcpnode.agent.config import (
    DEFAULT_EXPORT_DIRS,
    EXPORT_KINDS,
    LOG_LEVELS,
    MAX_CONFIG_BYTES,
    SECTIONS,
    UNIT_NAME,
    AgentConfig,
    ConfigError,
    ConfigUnreadable,
    DriftMode,
    LogFormat,
    PinRule,
    PinScope,
    Rollback,
    SlurmType,
    UdevSource,
    check_profile,
    load_config,
    parse_config,
)
from mcpnode.audit.expectation import Expectation
from mcpnode.cli.config_cmd import as_toml, config, summary_line
from mcpnode.exitcodes import EXIT_DATAERR, EXIT_NO_PROCESS
from mcpnode.host import Host

# tomllib is 3.11+; tomli (the same parser) is a dependency on 3.10.
tomllib = importlib.import_module("tomllib" if sys.version_info >= (3, 11) else "tomli")

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "etc" / "mcpnode" / "mcpnode.toml"
DOCS = REPO / "docs" / "config.md"
FILE = "/etc/mcpnode/site-config.toml"  # what the errors must name

SITE_PROFILE = '[profile]\nsummary = "test"\n\n[sysctl]\n"vm.swappiness" = 10\n'


def error(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(text, FILE)
    return info.value


def assert_names(err: ConfigError, key: str | None, fragment: str) -> None:
    assert err.file == FILE
    assert err.key == key
    message = str(err)
    assert message.startswith(FILE + ": ")
    if key is not None:
        assert message.startswith(f"{FILE}: {key}: ")
    assert fragment in message, message


# -- parse_config: type and range errors, one key at a time ---------------------------------

BAD_VALUES = [
    # [tuning]
    ("[tuning]\nprofile = 5", "tuning.profile", "profile name"),
    ("[tuning]\nprofile = ''", "tuning.profile", "profile name"),
    ("[tuning]\nprofile = 'Inference-Latency'", "tuning.profile", "[a-z0-9_-]"),
    ("[tuning]\nprofile = 'site.v2'", "tuning.profile", "profile name"),
    ("[tuning]\nprofile = '../base'", "tuning.profile", "profile name"),
    (f"[tuning]\nprofile = '{'a' * 65}'", "tuning.profile", "64 at most"),
    ("[tuning]\npersist = 'yes'", "tuning.persist", "true or false"),
    ("[tuning]\npersist = 1", "tuning.persist", "true or false"),
    ("[tuning]\nrollback = 'always'", "tuning.rollback", "never, on-stop"),
    ("[tuning]\nrollback = true", "tuning.rollback", "never, on-stop"),
    # [drift]
    ("[drift]\ninterval = '30s'", "drift.interval", "number of seconds"),
    ("[drift]\ninterval = true", "drift.interval", "number of seconds"),
    ("[drift]\ninterval = [30]", "drift.interval", "number of seconds"),
    ("[drift]\ninterval = 0", "drift.interval", "out of range (0.1..86400 seconds)"),
    ("[drift]\ninterval = 0.05", "drift.interval", "out of range"),
    ("[drift]\ninterval = 86401", "drift.interval", "out of range"),
    ("[drift]\ninterval = -1", "drift.interval", "out of range"),
    ("[drift]\ninterval = nan", "drift.interval", "out of range"),
    ("[drift]\ninterval = inf", "drift.interval", "out of range"),
    ("[drift]\nmode = 'fix'", "drift.mode", "remediate, report"),
    ("[drift]\nmode = 'Remediate'", "drift.mode", "remediate, report"),
    ("[drift]\nmax_remediations = 0", "drift.max_remediations", "integer 1..1000"),
    ("[drift]\nmax_remediations = 1001", "drift.max_remediations", "integer 1..1000"),
    ("[drift]\nmax_remediations = 2.5", "drift.max_remediations", "integer 1..1000"),
    ("[drift]\nmax_remediations = 3.0", "drift.max_remediations", "integer 1..1000"),
    ("[drift]\nmax_remediations = true", "drift.max_remediations", "integer 1..1000"),
    ("[drift]\nmax_remediations = '3'", "drift.max_remediations", "integer 1..1000"),
    ("[drift]\nwindow = 0.5", "drift.window", "out of range (1..604800 seconds)"),
    ("[drift]\nwindow = 604801", "drift.window", "out of range"),
    ("[drift]\nwindow = '10m'", "drift.window", "number of seconds"),
    # [devices]
    ("[devices]\ndebounce = -0.1", "devices.debounce", "out of range (0..60 seconds)"),
    ("[devices]\ndebounce = 61", "devices.debounce", "out of range"),
    ("[devices]\ndebounce = 'fast'", "devices.debounce", "number of seconds"),
    ("[devices]\nudev_source = 'netlink'", "devices.udev_source", "auto, udev, kernel, off"),
    ("[devices]\nudev_source = false", "devices.udev_source", "auto, udev, kernel, off"),
    # [placement]
    ("[placement]\nhousekeeping = 0", "placement.housekeeping", "must be a string"),
    ("[placement]\nhousekeeping = ['0']", "placement.housekeeping", "must be a string"),
    ("[placement]\nhousekeeping = 'first-cores'", "placement.housekeeping", "cpulist"),
    ("[placement]\nhousekeeping = 'all'", "placement.housekeeping", "cpulist"),
    ("[placement]\nhousekeeping = '0-'", "placement.housekeeping", "cpulist"),
    ("[placement]\nhousekeeping = '3-1'", "placement.housekeeping", "bad cpu range"),
    ("[placement]\nhousekeeping = '0;1'", "placement.housekeeping", "cpulist"),
    # [autopin]
    ("[autopin]\nenabled = 'on'", "autopin.enabled", "true or false"),
    ("[autopin]\ninterval = 0", "autopin.interval", "out of range"),
    ("[autopin]\ninterval = '15'", "autopin.interval", "number of seconds"),
    ("[autopin]\nscope = 'numa'", "autopin.scope", "slice, node"),
    ("[autopin]\nmigrate = 'yes'", "autopin.migrate", "true or false"),
    ("[autopin]\nrule = 'vllm'", "autopin.rule", "array of tables"),
    ("[autopin.rule]\nexe = 'python3'", "autopin.rule", "array of tables"),
    ("[autopin]\nenabled = true", "autopin.rule", "no [[autopin.rule]]"),
    ("[autopin]\nenabled = true\nrule = []", "autopin.rule", "no [[autopin.rule]]"),
    # [metrics]
    ("[metrics]\nlisten = 9847", "metrics.listen", "HOST:PORT"),
    ("[metrics]\nlisten = false", "metrics.listen", '"" to disable'),
    ("[metrics]\nlisten = 'localhost:9847'", "metrics.listen", "does not appear to be"),
    ("[metrics]\nlisten = '127.0.0.1'", "metrics.listen", "expected HOST:PORT"),
    ("[metrics]\nlisten = ':9847'", "metrics.listen", "expected HOST:PORT"),
    ("[metrics]\nlisten = '127.0.0.1:65536'", "metrics.listen", "port 65536 out of range"),
    ("[metrics]\nlisten = '127.0.0.1:123456'", "metrics.listen", "expected HOST:PORT"),
    ("[metrics]\nlisten = '::1:9847'", "metrics.listen", "expected HOST:PORT"),
    ("[metrics]\nlisten = '[::1]'", "metrics.listen", "expected HOST:PORT"),
    ("[metrics]\nlisten = '[127.0.0.1]:9847'", "metrics.listen", "brackets are for IPv6"),
    ("[metrics]\nlisten = ' 127.0.0.1:9847'", "metrics.listen", "does not appear to be"),
    ("[metrics]\nlisten = '0.0.0.0:9847'", "metrics.listen", "metrics.allow_remote = true"),
    ("[metrics]\nlisten = '[::]:9847'", "metrics.listen", "not a loopback address"),
    ("[metrics]\nlisten = '10.0.0.12:9847'", "metrics.listen", "not a loopback address"),
    (
        "[metrics]\nlisten = '10.0.0.12:9847'\nallow_remote = false",
        "metrics.listen",
        "not a loopback address",
    ),
    ("[metrics]\nallow_remote = 'yes'", "metrics.allow_remote", "true or false"),
    # [export]
    ("[export]\nkinds = 'prom'", "export.kinds", "list of names"),
    ("[export]\nkinds = [1]", "export.kinds", "list of names"),
    ("[export]\nkinds = ['dcgm']", "export.kinds", "unknown kind 'dcgm'"),
    ("[export]\nkinds = ['PROM']", "export.kinds", "unknown kind 'PROM'"),
    ("[export]\nkinds = ['prom', 'nfd', 'prom']", "export.kinds", "lists a kind twice"),
    ("[export]\nnfd_dir = 'features.d'", "export.nfd_dir", "not an absolute path"),
    ("[export]\nprom_dir = 5", "export.prom_dir", "must be a string"),
    ("[export]\nslurm_dir = '/etc/slurm/'", "export.slurm_dir", "write '/etc/slurm'"),
    ("[export]\nansible_dir = '/etc/../tmp'", "export.ansible_dir", "write '/tmp'"),
    ("[export]\nprom_dir = '//var/lib'", "export.prom_dir", "not a normalised path"),
    ("[export]\nprom_dir = '/'", "export.prom_dir", "root directory"),
    ("[export]\nprom_dir = '/var/lib/my dir'", "export.prom_dir", "no spaces"),
    ("[export]\nprom_dir = '/var/%h'", "export.prom_dir", "no spaces"),
    ("[export]\nnfd_expiry = 30", "export.nfd_expiry", "too short"),
    ("[export]\nnfd_expiry = -1", "export.nfd_expiry", "out of range"),
    ("[export]\nnfd_expiry = '5m'", "export.nfd_expiry", "number of seconds"),
    ("[export]\nslurm_type = 'long'", "export.slurm_type", "autodetect, short"),
    # [log]
    ("[log]\nformat = 'text'", "log.format", "auto, json, console"),
    ("[log]\nlevel = 'WARNING'", "log.level", "debug, info, warning, error"),
    ("[log]\nlevel = 'trace'", "log.level", "debug, info, warning, error"),
    # [health]
    ("[health]\ninterval = 0", "health.interval", "out of range (0.1..3600 seconds)"),
    ("[health]\ninterval = 'fast'", "health.interval", "number of seconds"),
    ("[health]\nnvml_events = 1", "health.nvml_events", "true or false"),
    ("[health]\nkmsg = true", "health.kmsg", "unknown key (keys of [health]: interval"),
    # [expect] (audit/expect.py parses it, the errors name the file and key the same way)
    ("expect = 8", "expect", "must be a table ([expect])"),
    ("[expect]\ngpus = 8", "expect.gpus", "unknown key (keys of [expect]: gpu_count"),
    ("[expect]\ngpu_count = -1", "expect.gpu_count", "integer 0..1024"),
    ("[expect]\ngpu_count = true", "expect.gpu_count", "integer 0..1024"),
    ("[expect]\ngpu_model = ''", "expect.gpu_model", "NVML's product name"),
    ("[expect]\ngpu_model = 80", "expect.gpu_model", "NVML's product name"),
    ("[expect]\nnvlinks_per_gpu = 40", "expect.nvlinks_per_gpu", "integer 0..36"),
    ("[expect]\npcie_gen = 9", "expect.pcie_gen", "integer 1..7"),
    ("[expect]\npcie_width = 0", "expect.pcie_width", "integer 1..32"),
    ("[expect]\nnic_count = 'eight'", "expect.nic_count", "integer 0..1024"),
    ("[expect]\nnic_rate_gbps = 0", "expect.nic_rate_gbps", "positive number"),
    ("[expect]\nnic_rate_gbps = '400'", "expect.nic_rate_gbps", "positive number"),
    ("[expect]\nnuma_nodes = 0", "expect.numa_nodes", "integer 1..1024"),
    ("[expect]\ndriver_min = 550", "expect.driver_min", "version such as '550.54'"),
    ("[expect]\ndriver_min = 'r550'", "expect.driver_min", "version such as '550.54'"),
]


@pytest.mark.parametrize(("text", "key", "fragment"), BAD_VALUES)
def test_bad_value_names_file_and_key(text: str, key: str, fragment: str) -> None:
    assert_names(error(text), key, fragment)


def test_every_key_has_a_bad_value_case() -> None:
    """The table above covers every key of every section (a new key needs its own case)."""
    covered = {key for _, key, _ in BAD_VALUES}
    for section, keys in SECTIONS.items():
        for key in keys:
            assert f"{section}.{key}" in covered
    for f in fields(Expectation):  # [expect]'s keys are the expectation's fields
        assert f"expect.{f.name}" in covered


# -- structure: sections, unknown keys, rules ----------------------------------------------

BAD_STRUCTURE = [
    ("[agent]\nprofile = 'base'", "agent", "unknown section"),
    ("[Tuning]\nprofile = 'base'", "Tuning", "unknown section"),
    ("profile = 'base'", "profile", "unknown section"),
    ("tuning = 'base'", "tuning", "must be a table ([tuning])"),
    ("[[drift]]\ninterval = 5", "drift", "must be a table ([drift])"),
    ("[drift]\nintervall = 5", "drift.intervall", "unknown key (keys of [drift]: interval"),
    ("[tuning]\nProfile = 'base'", "tuning.Profile", "unknown key"),
    ("[metrics]\nport = 9847", "metrics.port", "unknown key"),
    ("[tuning.extra]\nx = 1", "tuning.extra", "unknown key"),
    # [[autopin.rule]]
    ("[autopin]\nrule = [1]", "autopin.rule[0]", "must be a table"),
    ("[[autopin.rule]]\nexe = 'x'\nregex = 'y'", "autopin.rule[0].regex", "unknown key"),
    ("[[autopin.rule]]\nexe = 'x'\n[[autopin.rule]]\nEXE = 'y'", "autopin.rule[1].EXE", "unknown"),
    ("[[autopin.rule]]\nname = 'vllm'", "autopin.rule[0]", "needs at least one of exe"),
    ("[[autopin.rule]]\nexe = ''", "autopin.rule[0].exe", "non-empty string"),
    ("[[autopin.rule]]\nexe = 5", "autopin.rule[0].exe", "non-empty string"),
    ("[[autopin.rule]]\nname = 7\nexe = 'x'", "autopin.rule[0].name", "non-empty string"),
    ("[[autopin.rule]]\nunit = ['a.service']", "autopin.rule[0].unit", "non-empty string"),
    ("[[autopin.rule]]\nexe = '/usr/bin/python3'", "autopin.rule[0].exe", "without '/'"),
    ("[[autopin.rule]]\nexe = 'bin/tritonserver'", "autopin.rule[0].exe", "base name"),
    ("[[autopin.rule]]\ncmdline = 'vllm('", "autopin.rule[0].cmdline", "not a valid regular"),
    ("[[autopin.rule]]\ncmdline = '*serve'", "autopin.rule[0].cmdline", "not a valid regular"),
    ("[[autopin.rule]]\ncmdline = '(?P<x'", "autopin.rule[0].cmdline", "not a valid regular"),
    ("[[autopin.rule]]\nunit = 'vllm'", "autopin.rule[0].unit", "not a unit name"),
    ("[[autopin.rule]]\nunit = 'vllm.timer'", "autopin.rule[0].unit", "not a unit name"),
    ("[[autopin.rule]]\nunit = 'a/b.service'", "autopin.rule[0].unit", "not a unit name"),
    ("[[autopin.rule]]\nunit = 'my unit.service'", "autopin.rule[0].unit", "not a unit name"),
    (
        "[[autopin.rule]]\nname = 'vllm'\nexe = 'a'\n[[autopin.rule]]\nname = 'vllm'\nexe = 'b'",
        "autopin.rule[1].name",
        "'vllm' is used by an earlier rule",
    ),
    # An unnamed rule is rule<i>: the clash is reported on the rule, which wrote no `name`.
    (
        "[[autopin.rule]]\nname = 'rule1'\nexe = 'a'\n[[autopin.rule]]\nexe = 'b'",
        "autopin.rule[1]",
        "'rule1' is used by an earlier rule",
    ),
]


@pytest.mark.parametrize(("text", "key", "fragment"), BAD_STRUCTURE)
def test_bad_structure_names_file_and_key(text: str, key: str, fragment: str) -> None:
    assert_names(error(text), key, fragment)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[drift\ninterval = 5", "not valid TOML"),
        ("[drift]\ninterval = 5\ninterval = 6", "not valid TOML"),
        ("[drift]\ninterval = 5 s", "not valid TOML"),
        ('[tuning]\nprofile = "base', "not valid TOML"),
        ("[tuning]\n[tuning]\n", "not valid TOML"),
    ],
)
def test_invalid_toml_names_the_file(text: str, fragment: str) -> None:
    err = error(text)
    assert_names(err, None, fragment)
    assert "(at " in str(err)  # tomllib's position (line and column, or end of document)


def test_huge_file_is_refused_before_parsing() -> None:
    text = "# padding\n" * (MAX_CONFIG_BYTES // 10 + 1)
    assert_names(error(text), None, f"larger than {MAX_CONFIG_BYTES} bytes")
    # Multi-byte characters count as bytes, not as characters.
    text = "#" + "é" * (MAX_CONFIG_BYTES // 2)
    assert_names(error(text), None, "larger than")


def test_large_file_under_the_limit_parses() -> None:
    comments = "# " + "x" * 98 + "\n"
    text = comments * (MAX_CONFIG_BYTES // 200) + "[drift]\ninterval = 5\n"
    assert len(text.encode()) <= MAX_CONFIG_BYTES
    assert parse_config(text, FILE).drift_interval == 5.0


# -- parse_config: what valid files mean -----------------------------------------------------


def test_empty_file_is_the_defaults() -> None:
    assert parse_config("", FILE) == AgentConfig(file=FILE)
    assert parse_config("[tuning]\n[drift]\n[log]\n", FILE) == AgentConfig(file=FILE)


def test_integer_seconds_are_floats() -> None:
    cfg = parse_config("[drift]\ninterval = 30\nwindow = 3600\n[devices]\ndebounce = 0\n", FILE)
    assert (cfg.drift_interval, cfg.flap_window, cfg.debounce) == (30.0, 3600.0, 0.0)
    assert all(isinstance(v, float) for v in (cfg.drift_interval, cfg.flap_window, cfg.debounce))


@pytest.mark.parametrize(
    ("listen", "allow_remote", "address"),
    [
        ("127.0.0.1:9847", False, ("127.0.0.1", 9847)),
        ("127.0.0.2:9847", False, ("127.0.0.2", 9847)),
        ("[::1]:9847", False, ("::1", 9847)),
        ("127.0.0.1:0", False, ("127.0.0.1", 0)),
        ("0.0.0.0:9847", True, ("0.0.0.0", 9847)),
        ("[::]:9847", True, ("::", 9847)),
        ("10.0.0.12:9847", True, ("10.0.0.12", 9847)),
        ("[fd00::12]:65535", True, ("fd00::12", 65535)),
        ("127.0.0.1:9847", True, ("127.0.0.1", 9847)),
    ],
)
def test_metrics_listen(listen: str, allow_remote: bool, address: tuple[str, int]) -> None:
    flag = "true" if allow_remote else "false"
    cfg = parse_config(f"[metrics]\nlisten = '{listen}'\nallow_remote = {flag}\n", FILE)
    assert cfg.metrics_listen == listen
    assert cfg.metrics_allow_remote is allow_remote
    assert cfg.metrics_address == address


def test_empty_listen_disables_metrics() -> None:
    cfg = parse_config("[metrics]\nlisten = ''\n", FILE)
    assert cfg.metrics_listen is None
    assert cfg.metrics_address is None


@pytest.mark.parametrize("spec", ["first-core", "none", "0-1,64-65", "0", " 0-3 ", "0-15:2/4"])
def test_housekeeping_values(spec: str) -> None:
    assert parse_config(f"[placement]\nhousekeeping = '{spec}'\n", FILE).housekeeping == spec


@pytest.mark.parametrize(
    "kinds", [[], ["prom"], ["nfd", "prom", "slurm", "ansible"], ["ansible", "nfd"]]
)
def test_export_kinds(kinds: list[str]) -> None:
    text = "[export]\nkinds = [" + ", ".join(f'"{k}"' for k in kinds) + "]\n"
    assert parse_config(text, FILE).export_kinds == tuple(kinds)


def test_export_dirs_expiry_and_slurm_type() -> None:
    cfg = parse_config(
        "[export]\nprom_dir = '/var/lib/prometheus/node-exporter'\nnfd_expiry = 0\n"
        "slurm_type = 'short'\n",
        FILE,
    )
    assert cfg.export_dir("prom") == "/var/lib/prometheus/node-exporter"
    assert cfg.export_dir("nfd") == "/etc/kubernetes/node-feature-discovery/features.d"
    assert (cfg.nfd_expiry, cfg.slurm_type) == (0.0, "short")
    default = parse_config("", FILE)
    assert (default.nfd_expiry, default.slurm_type) == (300.0, "autodetect")
    assert dict(default.export_dirs) == {
        "ansible": "/etc/ansible/facts.d",
        "nfd": "/etc/kubernetes/node-feature-discovery/features.d",
        "prom": "/var/lib/node_exporter/textfile_collector",
        "slurm": "/etc/slurm",
    }


def test_rules() -> None:
    text = """
[autopin]
enabled = true
scope = "node"
interval = 5

[[autopin.rule]]
name = "vllm"
exe = "python3"
cmdline = 'vllm\\.entrypoints|vllm serve'

[[autopin.rule]]
unit = "triton.service"

[[autopin.rule]]
unit = "run-r1234.scope"
"""
    cfg = parse_config(text, FILE)
    assert cfg.autopin and cfg.pin_scope == "node" and cfg.pin_interval == 5.0
    vllm, triton, scope = cfg.pin_rules
    assert vllm == PinRule("vllm", "python3", re.compile(r"vllm\.entrypoints|vllm serve"), None)
    assert triton == PinRule("rule1", None, None, "triton.service")
    assert scope.name == "rule2" and scope.unit == "run-r1234.scope"


def test_rules_are_validated_when_autopin_is_off() -> None:
    # Enabling autopin later must not be the moment a year-old typo surfaces.
    assert_names(
        error("[autopin]\nenabled = false\n[[autopin.rule]]\ncmdline = '['\n"),
        "autopin.rule[0].cmdline",
        "not a valid regular expression",
    )


# -- the shipped example and the reference ---------------------------------------------------


def test_example_parses_to_the_defaults() -> None:
    shown = str(EXAMPLE)
    assert parse_config(EXAMPLE.read_text(), shown) == AgentConfig(file=shown)


def test_example_sets_every_key() -> None:
    doc = tomllib.loads(EXAMPLE.read_text())
    for section, keys in SECTIONS.items():
        assert sorted(doc[section]) == sorted(k for k in keys if k != "rule"), section


def _example_rules() -> str:
    """The commented-out [[autopin.rule]] examples, uncommented."""
    text = EXAMPLE.read_text()
    block = text[text.index("# [[autopin.rule]]") : text.index("[metrics]")]
    return "\n".join(line.removeprefix("#").removeprefix(" ") for line in block.splitlines())


def test_example_rules_parse_and_match_the_servers() -> None:
    cfg = parse_config("[autopin]\nenabled = true\n\n" + _example_rules(), FILE)
    by_name = {rule.name: rule for rule in cfg.pin_rules}
    assert sorted(by_name) == ["sglang", "triton", "trtllm", "vllm"]
    vllm = by_name["vllm"].cmdline
    assert vllm is not None
    assert vllm.search("/usr/bin/python3 -m vllm.entrypoints.openai.api_server --model m")
    assert vllm.search("/opt/venv/bin/python3 /opt/venv/bin/vllm serve meta-llama/Llama-3.1-8B")
    assert not vllm.search("python3 train.py --data vllm_outputs")
    sglang = by_name["sglang"].cmdline
    assert sglang is not None and sglang.search("python3 -m sglang.launch_server --model-path m")
    assert by_name["triton"].unit == "triton.service"


def test_docs_describe_every_section_and_key() -> None:
    docs = DOCS.read_text()
    for section, keys in SECTIONS.items():
        heading = f"### `[{section}]`"
        assert heading in docs, heading
        start = docs.index(heading)
        end = docs.find("\n### ", start + 1)
        chunk = docs[start : end if end != -1 else None]
        for key in keys:
            assert f"| `{key}` |" in chunk, f"{section}.{key}"
    for key in ("name", "exe", "cmdline", "unit"):
        assert f"| `{key}` |" in docs[docs.index("#### `[[autopin.rule]]`") :]


def test_docs_and_example_state_the_current_defaults() -> None:
    """The defaults quoted in the reference tables are the code's."""
    d = AgentConfig()
    docs = DOCS.read_text()
    for key, value in [
        ("interval", f"`{d.drift_interval:g}`"),
        ("max_remediations", f"`{d.max_remediations}`"),
        ("window", f"`{d.flap_window:g}`"),
        ("debounce", f"`{d.debounce:g}`"),
        ("listen", f'`"{d.metrics_listen}"`'),
        ("profile", f'`"{d.profile}"`'),
    ]:
        row = next(line for line in docs.splitlines() if line.startswith(f"| `{key}` |"))
        assert value in row, (key, row)


# -- load_config and check_profile (through a Host) ------------------------------------------


def make_root(tmp_path: Path, text: str | None = None) -> Path:
    root = tmp_path / "root"
    (root / "etc" / "mcpnode").mkdir(parents=True)
    if text is not None:
        (root / "etc" / "mcpnode" / "mcpnode.toml").write_text(text)
    return root


def test_load_config_reads_under_the_root(tmp_path: Path) -> None:
    root = make_root(tmp_path, "[tuning]\nprofile = 'inference-latency'\n")
    cfg = load_config(Host(root))
    shown = str(root / "etc" / "mcpnode" / "mcpnode.toml")
    assert cfg == AgentConfig(file=shown, profile="inference-latency")


def test_load_config_errors_name_the_real_path(tmp_path: Path) -> None:
    root = make_root(tmp_path, "[drift]\ninterval = 0\n")
    with pytest.raises(ConfigError) as info:
        load_config(Host(root))
    assert info.value.file == str(root / "etc" / "mcpnode" / "mcpnode.toml")
    assert info.value.key == "drift.interval"


def test_load_config_missing_file(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    with pytest.raises(ConfigUnreadable) as info:
        load_config(Host(root))
    assert isinstance(info.value, ConfigError)
    assert info.value.key is None
    assert "does not exist" in str(info.value)
    assert "docs/config.md" in str(info.value)
    assert str(root / "etc" / "mcpnode" / "mcpnode.toml") in str(info.value)


def test_load_config_missing_directory(tmp_path: Path) -> None:
    root = tmp_path / "empty"
    root.mkdir()
    with pytest.raises(ConfigUnreadable, match="does not exist"):
        load_config(Host(root))
    (root / "etc").write_text("not a directory\n")  # ENOTDIR on the way
    with pytest.raises(ConfigUnreadable, match="does not exist"):
        load_config(Host(root))


def test_load_config_directory_is_unreadable(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    (root / "etc" / "mcpnode" / "mcpnode.toml").mkdir()
    with pytest.raises(ConfigUnreadable, match="cannot be read"):
        load_config(Host(root))


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads mode 000 files")
def test_load_config_permission_denied(tmp_path: Path) -> None:
    root = make_root(tmp_path, "")
    (root / "etc" / "mcpnode" / "mcpnode.toml").chmod(0)
    with pytest.raises(ConfigUnreadable, match="cannot be read"):
        load_config(Host(root))


def test_load_config_refuses_non_utf8(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    data = b"[[autopin.rule]]\ncmdline = 'caf\xe9'\n"
    (root / "etc" / "mcpnode" / "mcpnode.toml").write_bytes(data)
    with pytest.raises(ConfigError) as info:
        load_config(Host(root))
    assert not isinstance(info.value, ConfigUnreadable)
    assert f"not UTF-8 (byte {data.index(0xE9)})" in str(info.value)


def test_load_config_huge_file(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    (root / "etc" / "mcpnode" / "mcpnode.toml").write_bytes(b"#" * (MAX_CONFIG_BYTES + 1))
    with pytest.raises(ConfigError, match="larger than"):
        load_config(Host(root))


def write_local_profile(root: Path, name: str, text: str) -> None:
    directory = root / "etc" / "mcpnode" / "profiles"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.toml").write_text(text)


def test_check_profile_loads_shipped_and_local(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    host = Host(root)
    assert check_profile(AgentConfig(profile="inference-latency"), host).name == "inference-latency"
    write_local_profile(root, "site", SITE_PROFILE)
    profile = check_profile(AgentConfig(profile="site"), host)
    assert profile.summary == "test"


def test_check_profile_missing(tmp_path: Path) -> None:
    host = Host(make_root(tmp_path))
    with pytest.raises(ConfigError) as info:
        check_profile(AgentConfig(file=FILE, profile="nosuch"), host)
    assert_names(info.value, "tuning.profile", "no profile named 'nosuch'")


def test_check_profile_malformed(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    write_local_profile(root, "broken", "[sysctl]\nvm.swappiness = 'x'\n[bogus]\n")
    with pytest.raises(ConfigError) as info:
        check_profile(AgentConfig(file=FILE, profile="broken"), Host(root))
    assert_names(info.value, "tuning.profile", "broken.toml")


def test_check_profile_system_dir(tmp_path: Path) -> None:
    system = tmp_path / "system"
    system.mkdir()
    (system / "only-here.toml").write_text(SITE_PROFILE)
    host = Host(make_root(tmp_path))
    assert check_profile(AgentConfig(profile="only-here"), host, system).name == "only-here"
    with pytest.raises(ConfigError, match=r"tuning\.profile"):
        check_profile(AgentConfig(profile="base"), host, system)  # not in that directory


# -- `mcpnode config check` / `config show` --------------------------------------------------


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An empty machine root: profiles come from the shipped directory only."""
    return make_root(tmp_path)


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(config, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def test_group() -> None:
    assert config.name == "config"
    code, out, _ = run("--help")
    assert code == 0
    assert "check" in out and "show" in out


def test_check_ok(tmp_path: Path, root: Path) -> None:
    path = tmp_path / "mcpnode.toml"
    path.write_text("[tuning]\nprofile = 'inference-latency'\n[drift]\ninterval = 30\n")
    code, out, err = run("check", str(path), "--host-file", "--root", str(root))
    assert (code, err) == (0, "")
    assert out == (
        f"{path}: ok (profile inference-latency, drift remediate every 30s, autopin off, "
        "metrics 127.0.0.1:9847)\n"
    )


def test_check_summary_autopin_and_metrics_off(tmp_path: Path, root: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        "[drift]\nmode = 'report'\ninterval = 0.5\n[metrics]\nlisten = ''\n"
        "[autopin]\nenabled = true\n" + _example_rules()
    )
    code, out, _ = run("check", str(path), "--host-file", "--root", str(root))
    assert code == 0
    assert out.endswith(
        ": ok (profile base, drift report every 0.5s, autopin on (4 rules), metrics off)\n"
    )


def test_check_the_shipped_example(root: Path) -> None:
    code, out, _ = run("check", str(EXAMPLE), "--host-file", "--root", str(root))
    assert code == 0
    assert out == summary_line(AgentConfig(file=str(EXAMPLE))) + "\n"


@pytest.mark.parametrize(
    "name", ["tmp8x_k2ab", ".ansible_tmpq1w2e3mcpnode.toml", "my config.toml", "ünï.toml", "x.j2"]
)
def test_check_any_temp_file_name(tmp_path: Path, root: Path, name: str) -> None:
    # Ansible's `validate: mcpnode config check %s` passes its temporary copy, whatever its name.
    directory = tmp_path / ".ansible" / "tmp" / "ansible-tmp-1700000000.1-42"
    directory.mkdir(parents=True)
    path = directory / name
    path.write_text(EXAMPLE.read_text())
    code, out, _ = run("check", str(path), "--host-file", "--root", str(root))
    assert code == 0
    assert out.startswith(f"{path}: ok (")


def test_check_relative_path(tmp_path: Path, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "site.toml").write_text("")
    monkeypatch.chdir(tmp_path)
    code, out, _ = run("check", "sub/site.toml", "--host-file", "--root", str(root))
    assert code == 0
    assert out.startswith(f"{tmp_path / 'sub' / 'site.toml'}: ok (")


def test_check_invalid_is_65(tmp_path: Path, root: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[drift]\nintervall = 5\n")
    code, out, err = run("check", str(path), "--host-file", "--root", str(root))
    assert (code, out) == (EXIT_DATAERR, "")
    assert code == 65
    assert err.startswith(f"mcpnode: config: {path}: drift.intervall: unknown key")
    assert err.count("\n") == 1


def test_check_invalid_toml_is_65(tmp_path: Path, root: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[drift\n")
    code, _, err = run("check", str(path), "--host-file", "--root", str(root))
    assert code == EXIT_DATAERR
    assert err.startswith(f"mcpnode: config: {path}: not valid TOML")


def test_check_missing_is_66(tmp_path: Path, root: Path) -> None:
    path = tmp_path / "nope.toml"
    code, out, err = run("check", str(path), "--host-file", "--root", str(root))
    assert (code, out) == (EXIT_NO_PROCESS, "")
    assert code == 66
    assert err.startswith(f"mcpnode: config: {path}: does not exist")


def test_check_directory_is_66(tmp_path: Path, root: Path) -> None:
    code, _, err = run("check", str(tmp_path), "--host-file", "--root", str(root))
    assert code == EXIT_NO_PROCESS
    assert "cannot be read" in err


def test_check_unknown_profile_is_65(tmp_path: Path, root: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[tuning]\nprofile = 'inference-latencyy'\n")
    code, out, err = run("check", str(path), "--host-file", "--root", str(root))
    assert (code, out) == (EXIT_DATAERR, "")
    assert err.startswith(f"mcpnode: config: {path}: tuning.profile: ")
    assert "no profile named 'inference-latencyy'" in err


def test_check_malformed_profile_is_65(tmp_path: Path, root: Path) -> None:
    write_local_profile(root, "site", "[sysctl]\n'net..core' = 1\n")
    path = tmp_path / "c.toml"
    path.write_text("[tuning]\nprofile = 'site'\n")
    code, _, err = run("check", str(path), "--host-file", "--root", str(root))
    assert code == EXIT_DATAERR
    assert f"{path}: tuning.profile: " in err
    assert str(root / "etc" / "mcpnode" / "profiles" / "site.toml") in err


def test_check_profile_under_root_and_profiles_dir(tmp_path: Path, root: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[tuning]\nprofile = 'site'\n")
    assert run("check", str(path), "--host-file", "--root", str(root))[0] == EXIT_DATAERR
    write_local_profile(root, "site", SITE_PROFILE)
    assert run("check", str(path), "--host-file", "--root", str(root))[0] == 0
    # --profiles-dir replaces the shipped profiles, as for `mcpnode apply`.
    system = tmp_path / "system"
    system.mkdir()
    path.write_text("")  # profile base: not in `system`
    code, _, err = run(
        "check", str(path), "--host-file", "--root", str(root), "--profiles-dir", str(system)
    )
    assert code == EXIT_DATAERR and "no profile named 'base'" in err


def test_check_resolves_file_under_root(root: Path) -> None:
    """As the agent reads --config: FILE is a path inside --root (a leading / optional), its
    profile is looked up there too, and messages name the file where it really is."""
    write_local_profile(root, "site", SITE_PROFILE)
    conf = root / "etc" / "mcpnode" / "mcpnode.toml"
    conf.write_text("[tuning]\nprofile = 'site'\n")
    for name in ("/etc/mcpnode/mcpnode.toml", "etc/mcpnode/mcpnode.toml"):
        code, out, err = run("check", "--root", str(root), name)
        assert (code, err) == (0, ""), err
        assert out.startswith(f"{conf}: ok (profile site,")
    code, out, err = run("check", "--root", str(root), "/etc/mcpnode/other.toml")
    assert (code, out) == (EXIT_NO_PROCESS, "")
    assert err.startswith(f"mcpnode: config: {root / 'etc/mcpnode/other.toml'}: does not exist")
    assert err.count("\n") == 1


def test_check_json(root: Path, tmp_path: Path) -> None:
    conf = root / "etc" / "mcpnode" / "mcpnode.toml"
    conf.write_text("[drift]\ninterval = 30\n")
    code, out, err = run(
        "check", "--root", str(root), "--format", "json", "/etc/mcpnode/mcpnode.toml"
    )
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert doc["schema"] == "mcpnode.config-check/v1"
    assert (doc["file"], doc["valid"], doc["profile"], doc["error"]) == (
        str(conf),
        True,
        "base",
        None,
    )
    conf.write_text("[drift]\nintervall = 30\n")
    code, out, err = run(
        "check", "--root", str(root), "--format", "json", "/etc/mcpnode/mcpnode.toml"
    )
    assert code == EXIT_DATAERR
    doc = json.loads(out)
    assert doc["valid"] is False
    assert doc["error"]["key"] == "drift.intervall" and "unknown key" in doc["error"]["detail"]
    assert err.count("\n") == 1  # the one line on stderr too


def test_show_json_is_the_toml_as_data(root: Path) -> None:
    conf = root / "etc" / "mcpnode" / "mcpnode.toml"
    conf.write_text(
        "[autopin]\nenabled = true\n[expect]\ngpu_count = 8\ndriver_min = '550.54'\n"
        + _example_rules()
    )
    code, out, _ = run("show", "--root", str(root), "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["schema"] == "mcpnode.config/v1" and doc["file"] == str(conf)
    _, toml_out, _ = run("show", "--root", str(root))
    assert doc["config"] == tomllib.loads(toml_out)
    assert doc["config"]["expect"] == {"gpu_count": 8, "driver_min": "550.54"}


def test_show_default_file_under_root(root: Path) -> None:
    text = "[tuning]\nprofile = 'inference-throughput'\n[export]\nkinds = ['nfd', 'prom']\n"
    (root / "etc" / "mcpnode" / "mcpnode.toml").write_text(text)
    code, out, err = run("show", "--root", str(root))
    assert (code, err) == (0, "")
    shown = str(root / "etc" / "mcpnode" / "mcpnode.toml")
    assert out.startswith(f"# Effective configuration of {shown}")
    assert parse_config(out, shown) == parse_config(text, shown)
    doc = tomllib.loads(out)
    for section, keys in SECTIONS.items():  # every key, defaults filled in (no rules here)
        assert sorted(doc[section]) == sorted(k for k in keys if k != "rule")


def test_show_missing_default_is_66(root: Path) -> None:
    code, out, err = run("show", "--root", str(root))
    assert (code, out) == (EXIT_NO_PROCESS, "")
    assert "does not exist" in err


def test_show_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[autopin]\nenabled = true\n" + _example_rules())
    code, out, _ = run("show", str(path))
    assert code == 0
    assert "cmdline = 'vllm\\.entrypoints|vllm serve'" in out  # literal string: readable
    assert parse_config(out, str(path)) == parse_config(path.read_text(), str(path))


def test_show_invalid_is_65(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[log]\nlevel = 'loud'\n")
    code, out, err = run("show", str(path))
    assert (code, out) == (EXIT_DATAERR, "")
    assert err.startswith(f"mcpnode: config: {path}: log.level: ")


def test_show_does_not_load_the_profile(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[tuning]\nprofile = 'elsewhere'\n")
    assert run("show", str(path))[0] == 0


def test_show_escapes_awkward_strings() -> None:
    rules = (
        PinRule("it's", exe="a\tb", cmdline=re.compile("x'y\\\\z\"")),
        PinRule('q"\\', exe="\x7f\x00é", unit="a\\x2db.service"),
    )
    cfg = AgentConfig(file=FILE, autopin=True, pin_rules=rules, metrics_listen=None)
    assert parse_config(as_toml(cfg), FILE) == cfg


def test_importing_the_group_does_not_import_main() -> None:
    # main.py imports this module to register the group; importing main back would be circular.
    code = "import sys, mcpnode.cli.config_cmd; assert 'mcpnode.cli.main' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


# -- property: `config show` output re-parses to an equal configuration ----------------------

cpu_range = st.tuples(st.integers(0, 4095), st.integers(0, 64)).map(
    lambda t: str(t[0]) if t[1] == 0 else f"{t[0]}-{t[0] + t[1]}"
)
housekeeping = st.one_of(
    st.sampled_from(["first-core", "none"]),
    st.lists(cpu_range, min_size=1, max_size=4).map(",".join),
)
regexes = st.one_of(
    st.sampled_from([r"vllm\.entrypoints|vllm serve", r"sglang\.launch_server", r"^\S+ -m x$"]),
    st.text(min_size=1, max_size=20).map(re.escape),
)
rule_fields = st.tuples(
    st.one_of(st.none(), st.text(min_size=1, max_size=16).filter(lambda s: "/" not in s)),
    st.one_of(st.none(), regexes),
    st.one_of(st.none(), st.from_regex(UNIT_NAME, fullmatch=True)),
).filter(lambda t: any(v is not None for v in t))
rules = st.lists(
    st.tuples(st.text(min_size=1, max_size=16), rule_fields), max_size=4, unique_by=lambda r: r[0]
).map(
    lambda rs: tuple(
        PinRule(name, exe, None if cmd is None else re.compile(cmd), unit)
        for name, (exe, cmd, unit) in rs
    )
)


def _listen(addr: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int) -> str:
    return f"{addr}:{port}" if addr.version == 4 else f"[{addr}]:{port}"


metrics = st.one_of(
    st.tuples(st.none(), st.booleans()),
    st.tuples(st.ip_addresses(), st.integers(0, 65535), st.booleans()).map(
        lambda t: (_listen(t[0], t[1]), t[2] or not t[0].is_loopback)
    ),
)


@st.composite
def agent_configs(draw: st.DrawFn) -> AgentConfig:
    pin_rules = draw(rules)
    listen, allow_remote = draw(metrics)
    return AgentConfig(
        file=draw(st.sampled_from([FILE, "/tmp/tmpab12cd", "/etc/it's.toml", "/tmp/a\nb"])),
        profile=draw(st.from_regex(r"[a-z0-9][a-z0-9_-]{0,63}", fullmatch=True)),
        persist=draw(st.booleans()),
        rollback=draw(st.sampled_from(get_args(Rollback))),
        drift_interval=draw(st.floats(0.1, 86400.0)),
        drift_mode=draw(st.sampled_from(get_args(DriftMode))),
        max_remediations=draw(st.integers(1, 1000)),
        flap_window=draw(st.floats(1.0, 7 * 86400.0)),
        debounce=draw(st.floats(0.0, 60.0)),
        udev_source=draw(st.sampled_from(get_args(UdevSource))),
        housekeeping=draw(housekeeping),
        autopin=bool(pin_rules) and draw(st.booleans()),
        pin_interval=draw(st.floats(0.1, 86400.0)),
        pin_scope=draw(st.sampled_from(get_args(PinScope))),
        pin_rules=pin_rules,
        metrics_listen=listen,
        metrics_allow_remote=allow_remote,
        export_kinds=tuple(draw(st.lists(st.sampled_from(EXPORT_KINDS), unique=True))),
        export_dirs=tuple(
            sorted(
                {
                    **dict(DEFAULT_EXPORT_DIRS),
                    **draw(
                        st.dictionaries(
                            st.sampled_from(EXPORT_KINDS),
                            st.from_regex(r"(/[a-z0-9_.-]*[a-z0-9_-])+", fullmatch=True).filter(
                                lambda d: "/./" not in d + "/" and "/../" not in d + "/"
                            ),
                        )
                    ),
                }.items()
            )
        ),
        nfd_expiry=draw(st.one_of(st.just(0.0), st.floats(60.0, 7 * 86400.0))),
        slurm_type=draw(st.sampled_from(get_args(SlurmType))),
        log_format=draw(st.sampled_from(get_args(LogFormat))),
        log_level=draw(st.sampled_from(LOG_LEVELS)),
    )


@settings(max_examples=300, deadline=None)
@given(agent_configs())
def test_show_round_trips(cfg: AgentConfig) -> None:
    text = as_toml(cfg)
    again = parse_config(text, cfg.file)
    assert again == cfg
    assert as_toml(again) == text
