"""The NFD feature file: Kubernetes label rules, the value sanitizer (property-based), the
NUMA layout label, NFD's 64 kB limit, and the labels on the recorded hosts."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpnode.codec.record import replace
from mcpnode.placement.exporters import nfd
from mcpnode.placement.exporters.nfd import (
    NfdLabelError,
    label_error,
    numa_layout,
    sanitize_value,
    validate_label,
)
from tests.support.exportcase import AUDIT, FIXTURES, placement, topology

# The Kubernetes rules restated independently of nfd.py's regexes (apimachinery
# IsQualifiedName / IsValidLabelValue), so a typo in one is caught by the other.
VALUE_RE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def k8s_value_ok(v: str) -> bool:
    return len(v) <= 63 and VALUE_RE.fullmatch(v) is not None


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("mcpnode.io/gpu.count", "8"),
        ("mcpnode.io/gpu-numa-layout", "0-0-0-0-1-1-1-1"),
        ("mcpnode.io/gpu.product", "NVIDIA-H100-80GB-HBM3"),
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
    assert got["mcpnode.io/gpu-numa-layout"] == "0-0-0-0-1-1-1-1"
    assert got["mcpnode.io/nvlink"] == "NV18"
    assert got["mcpnode.io/nvswitch"] == "true"
    assert got["mcpnode.io/gpu-nic-pix"] == "true"
    assert got["mcpnode.io/tuning-compliant"] == "false"
    assert got["mcpnode.io/audit-fail"] == "2"


# GPU Feature Discovery's names for the same facts (NVIDIA/k8s-device-plugin internal/lm:
# resource.go `product`/`count`/`memory`/`compute.major`/`compute.minor`, nvml.go's
# `cuda.driver.*` = the driver version's parts and `cuda.runtime.*` = the CUDA version), as
# GFD would write them on the recorded hosts, under mcpnode.io/ instead of nvidia.com/.
GFD = {
    "hgx-h100-8gpu-8nic": {
        "gpu.product": "NVIDIA-H100-80GB-HBM3",
        "gpu.count": "8",
        "gpu.memory": "81559",
        "gpu.compute.major": "9",
        "gpu.compute.minor": "0",
        "cuda.driver.major": "570",
        "cuda.driver.minor": "133",
        "cuda.driver.rev": "20",
        "cuda.runtime.major": "12",
        "cuda.runtime.minor": "8",
        "gpu.machine": "SYS-821GE-TNHR",
        "mig.capable": "true",
    },
    "dgx-a100": {
        "gpu.product": "NVIDIA-A100-SXM4-80GB",
        "gpu.count": "8",
        "gpu.memory": "81920",
        "gpu.compute.major": "8",
        "gpu.compute.minor": "0",
        "cuda.driver.major": "535",
        "cuda.driver.minor": "183",
        "cuda.driver.rev": "01",  # as the driver (and GFD) write it; Gt/Lt read 1
        "cuda.runtime.major": "12",
        "cuda.runtime.minor": "2",
        "gpu.machine": "DGXA100-920-23687-2530-000",
        "mig.capable": "true",
    },
}


@pytest.mark.parametrize("fixture", sorted(GFD))
def test_gfd_spellings(fixture: str) -> None:
    got = dict(nfd.labels(topology(fixture), placement(fixture), None))
    gfd_named = {k.removeprefix("mcpnode.io/"): v for k, v in got.items() if "." in k[11:]}
    assert gfd_named == GFD[fixture]
    for name in ("gpu.count", "gpu.memory", "gpu.compute.major", "cuda.driver.rev"):
        assert int(got[f"mcpnode.io/{name}"]) >= 0  # Gt/Lt need an integer
    # The old mcpnode spellings of the same facts are gone: one name per concept.
    for old in ("gpu-count", "gpu-model", "driver", "cuda"):
        assert f"mcpnode.io/{old}" not in got


def test_version_parts_stop_at_the_first_non_number() -> None:
    names = ("a", "b", "c")
    assert nfd._version_parts("570.133.20", names) == [("a", "570"), ("b", "133"), ("c", "20")]
    assert nfd._version_parts("12.8", names) == [("a", "12"), ("b", "8")]
    assert nfd._version_parts("560.28-beta.1", names) == [("a", "560")]
    assert nfd._version_parts(None, names) == []
    assert nfd._version_parts("1.2.3.4", names) == [("a", "1"), ("b", "2"), ("c", "3")]


def test_mixed_gpus_and_unknown_facts() -> None:
    """A product only when every GPU has the same NVML name (`mixed` otherwise); memory and
    compute capability only when all GPUs agree; nothing NVML did not say."""
    topo = topology("hgx-h100-8gpu-8nic")
    gpus = list(topo.gpus)
    assert gpus[1].nvml is not None
    gpus[1] = replace(
        gpus[1],
        nvml=replace(
            gpus[1].nvml, name="NVIDIA H200", memory_total_mib=143771, compute_capability=None
        ),
    )
    got = dict(nfd.labels(replace(topo, gpus=tuple(gpus)), placement("hgx-h100-8gpu-8nic"), None))
    assert got["mcpnode.io/gpu.product"] == "mixed"
    for absent in ("gpu.memory", "gpu.compute.major", "gpu.compute.minor"):
        assert f"mcpnode.io/{absent}" not in got
    assert got["mcpnode.io/gpu.count"] == "8"


def test_no_gpu_host_leaves_gpu_facts_out() -> None:
    got = dict(nfd.labels(topology("no-gpu-host"), placement("no-gpu-host"), None))
    assert got["mcpnode.io/gpu.count"] == "0"
    for absent in ("cuda.driver.major", "gpu.product", "gpu-numa-layout", "nvlink", "audit-fail"):
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


# -- expiry -------------------------------------------------------------------------------------


def nfd_worker_labels(text: str, now: datetime) -> dict[str, str]:
    """What nfd-worker's `local` source takes from a feature file at `now`, restated from
    kubernetes-sigs/node-feature-discovery source/local/local.go (parseFeatureFile): lines
    trimmed; `# +expiry-time=` (RFC 3339) sets the expiry of the lines after it; a line whose
    expiry is before now is skipped; any other `# +` directive is an error (logged, ignored);
    `name` alone means `name=true`."""
    expiry = now
    labels: dict[str, str] = {}
    for raw in text.split("\n"):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if line.startswith("# +"):
                key, sep, value = line[3:].partition("=")
                assert key == "expiry-time" and sep, f"nfd-worker rejects the directive {line!r}"
                expiry = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
            continue
        if expiry < now:
            continue
        key, sep, value = line.partition("=")
        labels[key] = value if sep else "true"
    return labels


def test_expiry_directive_as_nfd_worker_reads_it() -> None:
    text = nfd.render(topology("hgx-h100-8gpu-8nic"), placement("hgx-h100-8gpu-8nic"), AUDIT)
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    fresh = nfd.with_expiry(text, now + timedelta(seconds=300))
    assert "# +expiry-time=2026-01-02T03:09:05Z\n" in fresh
    assert nfd.expiry_of(fresh) == now + timedelta(seconds=300)
    labels = dict(
        nfd.labels(topology("hgx-h100-8gpu-8nic"), placement("hgx-h100-8gpu-8nic"), AUDIT)
    )
    assert nfd_worker_labels(fresh, now) == labels
    assert nfd_worker_labels(fresh, now + timedelta(seconds=301)) == {}  # expired: all gone
    # Without the directive nfd-worker keeps the labels for ever (and so does render's output).
    assert nfd_worker_labels(text, now + timedelta(days=365)) == labels
    assert nfd.expiry_of(text) is None
    # Refreshing replaces the directive; it never accumulates.
    again = nfd.with_expiry(fresh, now + timedelta(seconds=600))
    assert again.count(nfd.EXPIRY_DIRECTIVE) == 1
    assert nfd.expiry_of(again) == now + timedelta(seconds=600)
    # The directive comes before the first label (it only applies to the lines after it).
    lines = again.splitlines()
    first_label = next(i for i, ln in enumerate(lines) if not ln.startswith("#"))
    assert lines[first_label - 1].startswith(nfd.EXPIRY_DIRECTIVE)


def test_expiry_in_another_zone_is_written_in_utc() -> None:
    cet = timezone(timedelta(hours=1))
    out = nfd.with_expiry("# c\nmcpnode.io/x=1\n", datetime(2026, 1, 2, 4, 0, tzinfo=cet))
    assert out == "# c\n# +expiry-time=2026-01-02T03:00:00Z\nmcpnode.io/x=1\n"
    with pytest.raises(ValueError, match="timezone-aware"):
        nfd.with_expiry("x=1\n", datetime(2026, 1, 2))  # naive: the point of the test
