"""The container image `make image` built (image/build.sh): its OCI configuration, read from the
archive's own JSON and through skopeo, agrees with the Containerfile; and the image's root file
system, unpacked from the archive's layer, runs mcpnode under chroot in a private mount
namespace (containers cannot run here: crun's setrlimit needs CAP_SYS_RESOURCE) as its
non-root user (--version, topo and audit of a fixture, output equal to this checkout's) and as
root (audit of this machine through /proc and /sys, as the DaemonSet runs it).

The image takes about a minute to build and needs Debian's mirror, so `make test` does not
build it: these tests run when build/image/image.json describes an image built from this
checkout's sources (image/build.sh hash), and skip saying why otherwise.
`make image-test` builds the image, then runs this file.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import auditroot

REPO = Path(__file__).resolve().parents[2]
IMAGE_JSON = REPO / "build" / "image" / "image.json"
FIXTURE = REPO / "tests" / "fixtures" / "hosts" / "hgx-h100-8gpu-8nic"
NONROOT = "65532:65532"
MAX_ROOTFS_MIB = 160  # measured 124 MiB (bookworm minbase + python3 + mcpnode's venv)


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (chroot, mount namespaces)"
    if not IMAGE_JSON.exists():
        return "no image built: run `make image` (or `make image-test`)"
    built = json.loads(IMAGE_JSON.read_text())["source_hash"]
    now = subprocess.run(
        ["bash", str(REPO / "image" / "build.sh"), "hash"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    ).stdout.strip()
    if built != now:
        return f"build/image is stale (built from {built}, sources now {now}): run `make image`"
    return None


WHY_NOT = _why_not()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")


@pytest.fixture(scope="module")
def image() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(IMAGE_JSON.read_text())
    return doc


@pytest.fixture(scope="module")
def oci(image: dict[str, Any]) -> dict[str, Any]:
    """The archive's index, manifest, config and layer blobs, read as a runtime would."""
    with tarfile.open(REPO / image["archive"]) as tar:

        def blob(digest: str) -> bytes:
            algo, hexd = digest.split(":")
            f = tar.extractfile(f"./blobs/{algo}/{hexd}")
            assert f is not None
            return f.read()

        f = tar.extractfile("./index.json")
        assert f is not None
        index = json.load(f)
        [entry] = index["manifests"]
        manifest = json.loads(blob(entry["digest"]))
        config = json.loads(blob(manifest["config"]["digest"]))
        layers = [blob(layer["digest"]) for layer in manifest["layers"]]
    return {"index": index, "entry": entry, "config": config, "layers": layers}


@pytest.fixture(scope="module")
def rootfs(oci: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image's file system, unpacked from its layers (owners kept: we are root)."""
    root = tmp_path_factory.mktemp("image") / "rootfs"
    root.mkdir()
    IMAGE_ENV[:] = oci["config"]["config"]["Env"]
    for layer in oci["layers"]:
        data = gzip.decompress(layer) if layer[:2] == b"\x1f\x8b" else layer
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(root, filter="tar" if sys.version_info >= (3, 12) else None)
    return root


def containerfile() -> dict[str, str]:
    """The Containerfile's instructions (last of each), continuation lines joined."""
    text = (REPO / "Containerfile").read_text().replace("\\\n", " ")
    out = {}
    for line in text.splitlines():
        m = re.match(r"(ENTRYPOINT|CMD|USER|EXPOSE|LABEL|STOPSIGNAL|WORKDIR)\s+(.*)", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


# -- the image configuration --------------------------------------------------------------------


def test_config_matches_the_containerfile(oci: dict[str, Any], image: dict[str, Any]) -> None:
    cfg = oci["config"]["config"]
    cf = containerfile()
    assert cfg["Entrypoint"] == json.loads(cf["ENTRYPOINT"]) == ["/opt/mcpnode/bin/mcpnode"]
    assert cfg["Cmd"] == json.loads(cf["CMD"]) == ["agent"]
    assert cfg["User"] == cf["USER"] == NONROOT
    assert list(cfg["ExposedPorts"]) == [cf["EXPOSE"]] == ["9847/tcp"]
    assert cfg["StopSignal"] == cf["STOPSIGNAL"] == "SIGTERM"
    assert cfg["WorkingDir"] == cf["WORKDIR"] == "/"
    labels = cfg["Labels"]
    assert set(labels) == set(re.findall(r"([a-z.-]+)=", cf["LABEL"]))
    assert labels["io.mcpnode.source-hash"] == image["source_hash"]
    assert labels["org.opencontainers.image.version"] == image["tag"]
    assert "PYTHONDONTWRITEBYTECODE=1" in cfg["Env"]
    assert oci["config"]["os"] == "linux"
    assert oci["entry"]["annotations"]["org.opencontainers.image.ref.name"] == image["tag"]


def test_skopeo_reads_the_archive(image: dict[str, Any], oci: dict[str, Any]) -> None:
    if shutil.which("skopeo") is None:
        pytest.skip("skopeo not installed (make image installs it)")
    ref = f"oci-archive:{REPO / image['archive']}:{image['tag']}"
    out = subprocess.run(["skopeo", "inspect", ref], capture_output=True, text=True, check=True)
    doc = json.loads(out.stdout)
    assert doc["Labels"] == oci["config"]["config"]["Labels"]
    assert doc["Architecture"] == oci["config"]["architecture"]
    assert len(doc["Layers"]) == len(oci["layers"]) == 1


def test_image_is_small_and_carries_no_installer(rootfs: Path, image: dict[str, Any]) -> None:
    assert image["rootfs_bytes"] < MAX_ROOTFS_MIB << 20
    venv = rootfs / "opt" / "mcpnode"
    assert (venv / "bin" / "mcpnode").is_file()
    assert not (venv / "bin" / "pip").exists()
    site = next((venv / "lib").glob("python3.*/site-packages"))
    assert not list(site.glob("pip*")) and not list(site.glob("setuptools*"))
    assert not (rootfs / "usr" / "share" / "perl").exists()  # usrmerge kept out
    passwd = (rootfs / "etc" / "passwd").read_text()
    assert "mcpnode:x:65532:65532:" in passwd


# -- running it ---------------------------------------------------------------------------------


IMAGE_ENV: list[str] = []  # the image config's Env, set by the rootfs fixture


def image_argv(rootfs: Path, *argv: str, user: str | None = NONROOT) -> list[str]:
    """`argv` under chroot into the image, in a private mount namespace that has /dev, /proc
    and /sys (like a container's) and the fixture at /mnt/fixture, read-only; the environment
    is the image's (its Env), nothing of ours."""
    mnt = rootfs / "mnt" / "fixture"
    mnt.mkdir(parents=True, exist_ok=True)
    for d in ("dev", "proc", "sys"):
        (rootfs / d).mkdir(exist_ok=True)
    # /sys and /proc/sys read-only, as a container runtime gives them to an unprivileged
    # container: nothing run from the image can change this machine.
    script = (
        'set -e; r="$1"; shift; mount --rbind /dev "$r/dev"; mount -t proc proc "$r/proc"; '
        'mount --bind "$r/proc/sys" "$r/proc/sys"; mount -o remount,bind,ro "$r/proc/sys"; '
        'mount --rbind /sys "$r/sys"; mount -o remount,bind,ro "$r/sys"; '
        'mount --bind "$FIXTURE" "$r/mnt/fixture"; mount -o remount,bind,ro "$r/mnt/fixture"; '
        'exec "$@"'
    )
    chroot = ["chroot", *(["--userspec", user] if user else []), str(rootfs)]
    assert IMAGE_ENV, "the rootfs fixture sets the image's environment"
    return [
        "unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
        str(rootfs), *chroot, "/usr/bin/env", "-i", *IMAGE_ENV, *argv,
    ]  # fmt: skip


HOST_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "FIXTURE": str(FIXTURE)}


def in_image(
    rootfs: Path, *argv: str, user: str | None = NONROOT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        image_argv(rootfs, *argv, user=user),
        capture_output=True,
        text=True,
        env=HOST_ENV,
        timeout=120,
        check=False,
    )


def here(*argv: str) -> subprocess.CompletedProcess[str]:
    """The same command from this checkout's venv."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "mcpnode"), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_version_as_the_nonroot_user(rootfs: Path, image: dict[str, Any]) -> None:
    got = in_image(rootfs, "mcpnode", "--version")
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == f"mcpnode, version {image['tag']}"
    who = in_image(rootfs, "id", "-u")
    assert who.stdout.strip() == "65532"


def test_topo_of_a_fixture_equals_this_checkouts(rootfs: Path) -> None:
    got = in_image(rootfs, "mcpnode", "topo", "--root", "/mnt/fixture", "--format", "json")
    assert got.returncode == 0, got.stderr
    want = here("topo", "--root", str(FIXTURE), "--format", "json")
    assert want.returncode == 0, want.stderr
    assert json.loads(got.stdout) == json.loads(want.stdout)


def test_audit_of_a_fixture_equals_this_checkouts(rootfs: Path) -> None:
    args = ("audit", "--root", "/mnt/fixture", "--format", "json")
    got = in_image(rootfs, "mcpnode", *args)
    assert got.returncode in (0, 1), got.stderr
    want = here("audit", "--root", str(FIXTURE), "--format", "json")
    a, b = json.loads(got.stdout), json.loads(want.stdout)
    del a["generated_at"], b["generated_at"]
    assert a == b


def test_audit_of_this_machine_as_root(rootfs: Path) -> None:
    """What the DaemonSet's container sees: this kernel's /proc and /sys."""
    got = in_image(rootfs, "mcpnode", "audit", "--format", "json", user=None)
    assert got.returncode in (0, 1), got.stderr  # 2 would be "the audit could not run"
    report = json.loads(got.stdout)
    areas = {f["area"] for f in report["findings"]}
    assert {"self", "kernel", "tuning", "kubelet"} <= areas
    assert report["problems"] == []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_the_daemonsets_agent_starts_in_the_image_and_answers_its_probe(rootfs: Path) -> None:
    """`mcpnode agent` from the image with the DaemonSet's ConfigMap (exports nfd and prom),
    as root, on a copy of a fixture node inside the image (its sysctls are the copy's files,
    nothing of this machine is tuned): the probe's GET /metrics answers once it is up, the
    exporters' files appear where the DaemonSet mounts the host's directories, SIGTERM stops
    it with exit 0."""
    node = auditroot.build(rootfs / "srv", auditroot.HGX)
    port = free_port()
    configmap = yaml.safe_load((REPO / "deploy/kubernetes/configmap.yaml").read_text())
    config = configmap["data"]["mcpnode.toml"].replace("0.0.0.0:9847", f"127.0.0.1:{port}")
    assert f"127.0.0.1:{port}" in config
    (node / "etc/mcpnode").mkdir(parents=True, exist_ok=True)
    (node / "etc/mcpnode/mcpnode.toml").write_text(config)
    # The DaemonSet's hostPath volumes are DirectoryOrCreate: the directories exist.
    exports = (
        "etc/kubernetes/node-feature-discovery/features.d/mcpnode",
        "var/lib/node_exporter/textfile_collector/mcpnode.prom",
    )
    for rel in exports:
        (node / rel).parent.mkdir(parents=True, exist_ok=True)
    inside = "/" + str(node.relative_to(rootfs))
    argv = image_argv(rootfs, "mcpnode", "agent", "--root", inside, user=None)
    proc = subprocess.Popen(
        argv, env=HOST_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        body = None
        deadline = time.monotonic() + 90
        while body is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    assert r.status == 200
                    body = r.read().decode()
            except OSError:
                time.sleep(0.2)
        assert body is not None, f"no answer on /metrics (agent exit {proc.poll()})"
        assert "mcpnode_" in body
        for rel in exports:
            assert (node / rel).stat().st_size > 0, rel
        assert (node / "run/mcpnode/manifest.json").exists()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 0, proc.stderr.read() if proc.stderr else ""
