"""The NFD feature file: Kubernetes label rules, the value sanitizer (property-based), the
NUMA layout label, NFD's 64 kB limit, and the labels on the recorded hosts."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpnode.placement.exporters import nfd
from mcpnode.placement.exporters.nfd import (
    NfdLabelError,
    label_error,
    numa_layout,
    sanitize_value,
    validate_label,
)
from mcpnode.topology.model import replace
from tests.exportcase import AUDIT, FIXTURES, placement, topology

# The Kubernetes rules restated independently of nfd.py's regexes (apimachinery
# IsQualifiedName / IsValidLabelValue), so a typo in one is caught by the other.
VALUE_RE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def k8s_value_ok(v: str) -> bool:
    return len(v) <= 63 and VALUE_RE.fullmatch(v) is not None


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("mcpnode.io/gpu-count", "8"),
        ("mcpnode.io/gpu-numa-layout", "0-0-0-0-1-1-1-1"),
        ("mcpnode.io/driver", "570.133.20"),
        ("mcpnode.io/x", ""),  # an empty value is valid
        ("mcpnode.io/a_b.c-D", "A_b.c-9"),
        ("feature.node.kubernetes.io/gpu", "true"),  # NFD's own namespace is allowed
        ("sub.feature.node.kubernetes.io/gpu", "true"),
        ("a" * 63 + ".io/n", "v"),  # a DNS label of 63
        ("mcpnode.io/" + "n" * 63, "v" * 63),  # both at the limit
        ("a." * 125 + "io/n", "v"),  # prefix of 253
    ],
)
def test_valid_labels(key: str, value: str) -> None:
    assert label_error(key, value) is None
    validate_label(key, value)


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("gpu-count", "8", "unprefixed"),
        ("/gpu-count", "8", "prefix"),
        ("Mcpnode.io/x", "1", "prefix"),  # DNS subdomains are lowercase
        ("mcpnode..io/x", "1", "prefix"),
        ("-mcpnode.io/x", "1", "prefix"),
        ("a." * 126 + "io/n", "v", "prefix"),  # prefix of 255
        ("kubernetes.io/x", "1", "denied"),
        ("node.kubernetes.io/x", "1", "denied"),
        ("mcpnode.io/", "1", "name"),
        ("mcpnode.io/-x", "1", "name"),
        ("mcpnode.io/x-", "1", "name"),
        ("mcpnode.io/a b", "1", "name"),
        ("mcpnode.io/" + "n" * 64, "1", "name"),
        ("mcpnode.io/x", "v" * 64, "value"),
        ("mcpnode.io/x", "-v", "value"),
        ("mcpnode.io/x", "v.", "value"),
        ("mcpnode.io/x", "a b", "value"),
        ("mcpnode.io/x", "a/b", "value"),
        ("mcpnode.io/x", "NV18=1", "value"),
        ("mcpnode.io/x", "é", "value"),
    ],
)
def test_invalid_labels(key: str, value: str, why: str) -> None:
    err = label_error(key, value)
    assert err is not None and why in err
    with pytest.raises(NfdLabelError):
        validate_label(key, value)


@given(st.text())
def test_sanitized_value_is_always_valid(raw: str) -> None:
    out = sanitize_value(raw)
    assert k8s_value_ok(out), out
    assert label_error("mcpnode.io/x", out) is None


@given(st.text())
def test_sanitize_is_idempotent(raw: str) -> None:
    once = sanitize_value(raw)
    assert sanitize_value(once) == once


@given(st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", fullmatch=True))
def test_sanitize_keeps_valid_values(value: str) -> None:
    assert sanitize_value(value) == value


@given(st.text(alphabet=st.characters(codec="ascii"), min_size=1))
def test_sanitize_keeps_alphanumerics_in_order(raw: str) -> None:
    """Nothing alphanumeric is invented: the output's alphanumerics are a prefix of the
    input's (the cut at 63 may drop a tail)."""
    alnum = [c for c in raw if c.isalnum()]
    got = [c for c in sanitize_value(raw) if c.isalnum()]
    assert got == alnum[: len(got)]


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
        ("  535.183.01  ", "535.183.01"),
        ("a//b", "a-b"),
        ("---", ""),
        ("x" * 70, "x" * 63),
        ("x" * 62 + ".yz", "x" * 62),  # cut at 63 leaves a trailing '.', which is stripped
    ],
)
def test_sanitize_examples(raw: str, want: str) -> None:
    assert sanitize_value(raw) == want


@pytest.mark.parametrize(
    ("nodes", "want"),
    [
        ([0, 0, 0, 0, 1, 1, 1, 1], "0-0-0-0-1-1-1-1"),
        ([3, 3, 1, 1, 7, 7, 5, 5], "3-3-1-1-7-7-5-5"),
        ([None, 0], "u-0"),
        ([], None),
        ([0] * 33, "33x0"),  # one node per GPU would take 65 characters: runs
        ([0] * 17 + [1] * 16, "17x0-16x1"),
    ],
)
def test_numa_layout(nodes: list[int | None], want: str | None) -> None:
    assert numa_layout(nodes) == want
    if want is not None:
        assert k8s_value_ok(want)


def test_numa_layout_fits_exactly_63() -> None:
    assert numa_layout([0] * 31 + [1]) == "-".join(["0"] * 31 + ["1"])  # 63 characters


def test_numa_layout_too_long_even_as_runs() -> None:
    alternating = [i % 2 for i in range(40)]
    assert numa_layout(alternating) is None


@pytest.mark.parametrize("fixture", FIXTURES)
def test_every_line_of_every_fixture_is_a_valid_label(fixture: str) -> None:
    text = nfd.render(topology(fixture), placement(fixture), AUDIT)
    assert len(text.encode()) <= nfd.FILE_MAX_BYTES
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep, line
        assert key.startswith("mcpnode.io/")
        assert label_error(key, value) is None
        assert k8s_value_ok(value)


def test_hgx_labels() -> None:
    got = dict(nfd.labels(topology("hgx-h100-8gpu-8nic"), placement("hgx-h100-8gpu-8nic"), AUDIT))
    assert got["mcpnode.io/gpu-count"] == "8"
    assert got["mcpnode.io/gpu-numa-layout"] == "0-0-0-0-1-1-1-1"
    assert got["mcpnode.io/nvlink"] == "NV18"
    assert got["mcpnode.io/nvswitch"] == "true"
    assert got["mcpnode.io/gpu-nic-pix"] == "true"
    assert got["mcpnode.io/driver"] == "570.133.20"
    assert got["mcpnode.io/cuda"] == "12.8"
    assert got["mcpnode.io/gpu-model"] == "H100-80GB-HBM3"
    assert got["mcpnode.io/tuning-compliant"] == "false"
    assert got["mcpnode.io/audit-fail"] == "2"


def test_no_gpu_host_leaves_gpu_facts_out() -> None:
    got = dict(nfd.labels(topology("no-gpu-host"), placement("no-gpu-host"), None))
    assert got["mcpnode.io/gpu-count"] == "0"
    for absent in ("driver", "cuda", "gpu-numa-layout", "nvlink", "gpu-nic-pix", "audit-fail"):
        assert f"mcpnode.io/{absent}" not in got


def test_nvlink_labels() -> None:
    pair = dict(nfd.labels(topology("h100-nvl-pair"), placement("h100-nvl-pair"), None))
    assert (pair["mcpnode.io/nvlink"], pair["mcpnode.io/nvswitch"]) == ("NV12", "false")
    assert pair["mcpnode.io/nvlink-all-pairs"] == "true"
    pcie = dict(
        nfd.labels(topology("pcie-4x-l40s-2socket"), placement("pcie-4x-l40s-2socket"), None)
    )
    assert pcie["mcpnode.io/nvlink"] == "none"
    assert "mcpnode.io/nvlink-all-pairs" not in pcie


def test_unknown_compliance_is_labelled_unknown() -> None:
    """Three-valued: a missing label would pass a `NotIn [false]` selector as compliant."""
    audit = replace(AUDIT, tuning_compliant=None, drift_keys=())
    got = dict(nfd.labels(topology("hgx-h100-8gpu-8nic"), placement("hgx-h100-8gpu-8nic"), audit))
    assert got["mcpnode.io/tuning-compliant"] == "unknown"


def test_file_over_64k_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nfd, "FILE_MAX_BYTES", 100)
    with pytest.raises(NfdLabelError, match="over NFD's 100"):
        nfd.render(topology("hgx-h100-8gpu-8nic"), placement("hgx-h100-8gpu-8nic"), AUDIT)
