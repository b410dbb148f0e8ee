"""The mistakes a user makes in the first hour, each answered with one clear line on stderr, the
documented exit status, no traceback and nothing changed: an output file in a directory that
does not exist (2: the command cannot do its job, as the audit's 0/1/2 says), a profile name
that does not exist (a usage error, 64), a `--root` that is not a machine root (2). Run as
real processes (`python -m mcpnode`), as a shell would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.exportcase import HOSTS

REPO = Path(__file__).resolve().parents[2]
ROOT = str(HOSTS / "h100-nvl-pair")
PROFILES = "(profiles: base, inference-latency, inference-throughput; searched "


def mcpnode(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mcpnode", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.mark.parametrize(
    "argv",
    [
        ("snapshot", "--root", ROOT, "-o", "{missing}/node.tar.gz"),
        ("audit", "--root", ROOT, "--format", "json", "-o", "{missing}/audit.json"),
        ("audit", "--root", ROOT, "--output", "{file}/audit.json"),
    ],
)
def test_output_file_in_a_missing_directory(tmp_path: Path, argv: tuple[str, ...]) -> None:
    (tmp_path / "a-file").write_text("")
    args = [a.format(missing=tmp_path / "nope", file=tmp_path / "a-file") for a in argv]
    proc = mcpnode(*args)
    assert proc.returncode == 2 and proc.stdout == ""  # could not do its job (audit: 0/1/2)
    line = one_line(proc)
    out = Path(args[-1])
    what = "is not a directory" if "a-file" in args[-1] else "does not exist"
    assert line == f"mcpnode: --output {out}: the directory {out.parent} {what}"
    assert not (tmp_path / "nope").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


@pytest.mark.parametrize(
    "argv",
    [
        ("apply", "--profile", "inference-latencyy", "--dry-run", "--root", ROOT),
        ("verify", "--profile", "inference-latencyy", "--root", ROOT),
        ("profiles", "show", "inference-latencyy", "--root", ROOT),
        ("audit", "--profile", "inference-latencyy", "--root", ROOT),
    ],
)
def test_unknown_profile_is_a_usage_error(argv: tuple[str, ...]) -> None:
    proc = mcpnode(*argv)
    assert proc.returncode == 64, proc.stderr
    assert proc.stdout == ""
    line = one_line(proc)
    assert line.startswith(f"mcpnode: unknown profile 'inference-latencyy' {PROFILES}")


def test_a_profile_that_exists_but_does_not_load_is_not_a_usage_error(tmp_path: Path) -> None:
    """That is the file's fault, not the command line's: the audit reports it (FAIL, exit 1)."""
    bad = tmp_path / "profiles"
    bad.mkdir()
    (bad / "broken.toml").write_text("[profile\n")
    proc = mcpnode("audit", "--root", ROOT, "--profile", "broken", "--profiles-dir", str(bad))
    assert proc.returncode == 1, proc.stderr
    assert "[FAIL] tuning.profile" in proc.stdout


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda d: d / "nowhere", "no such file or directory"),
        (lambda d: d / "plain.txt", "not a directory, .tar.gz or .tar.bz2"),
        (lambda d: d / "broken.tar.gz", "corrupt or truncated archive"),
    ],
)
def test_bad_root(tmp_path: Path, make: object, why: str) -> None:
    (tmp_path / "plain.txt").write_text("hello\n")
    (tmp_path / "broken.tar.gz").write_bytes(b"\x1f\x8b\x08\x00 not really gzip")
    root = make(tmp_path)  # type: ignore[operator]
    for argv in (("topo", "--root", str(root)), ("config", "show", "--root", str(root))):
        proc = mcpnode(*argv)
        assert proc.returncode == 2, proc.stderr
        line = one_line(proc)
        assert line.startswith(f"mcpnode: --root {root}: "), line
        assert why in line
