"""The two builds of the image cannot drift apart: the Containerfile (registries and a runtime)
and image/build.sh (`make image`, offline) install the same Debian packages on the same suite,
run the same image/install.sh, and name the user install.sh creates. Static: runs everywhere,
with or without a built image (tests/deploy/test_image.py checks the built one)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONTAINERFILE = (REPO / "Containerfile").read_text()
BUILD = (REPO / "image" / "build.sh").read_text()
INSTALL = (REPO / "image" / "install.sh").read_text()


def test_same_suite_and_packages() -> None:
    [suite] = re.findall(r"^ARG DEBIAN_SUITE=(\S+)$", CONTAINERFILE, re.M)
    assert f"SUITE={suite}\n" in BUILD
    assert "FROM docker.io/library/debian:${DEBIAN_SUITE}-slim" in CONTAINERFILE
    [apt] = re.findall(r"apt-get install -y --no-install-recommends ([^\n&\\]+)", CONTAINERFILE)
    [include] = re.findall(r"--include=(\S+)", BUILD)
    assert sorted(apt.split()) == sorted(include.split(",")) == ["python3"]


def test_same_install_step_and_user() -> None:
    assert "/bin/sh /tmp/wheels/install.sh" in CONTAINERFILE
    assert "/bin/sh /tmp/wheels/install.sh" in BUILD
    assert "cp image/install.sh" in BUILD
    [uid] = re.findall(r"^UID_NONROOT=(\d+)$", INSTALL, re.M)
    [user] = re.findall(r"^USER (\S+)$", CONTAINERFILE, re.M)
    assert user == f"{uid}:{uid}"
    assert f"NONROOT={uid}:{uid}" in BUILD


def test_scripts_parse() -> None:
    for script, shell in (("image/build.sh", "bash"), ("image/install.sh", "sh")):
        got = subprocess.run([shell, "-n", str(REPO / script)], capture_output=True, text=True)
        assert got.returncode == 0, f"{script}: {got.stderr}"


def test_hash_names_the_sources() -> None:
    """`image/build.sh hash` (what tests/deploy/test_image.py compares) needs no root and no
    tools."""
    got = subprocess.run(
        ["bash", "image/build.sh", "hash"], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert re.fullmatch(r"[0-9a-f]{16}\n", got.stdout)
