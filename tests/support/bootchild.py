"""`mcpnode apply` / `verify` / `rollback` of a `[bootloader]` profile on the live root, inside a
throwaway mount namespace (the child of `unshare --mount`): /etc/default and a scratch /boot
are tmpfs there, and the boot tools are fakes first on PATH that record every call, as the
nvidia-smi stand-ins do elsewhere. Nothing outside the namespace is written: the journal goes
to --state-dir, the profile holds no other section. Standard library only (plus tests/).

argv[1]: a JSON object {"method": "grub"|"grubby", "work": DIR, "repo": DIR}, and for "grub"
optionally "dropin": what /etc/default/grub.d/90-mcpnode.cfg is before apply ("regular": 0640
owned 1234:5678; "loose": 0666; "symlink" to /etc/default/grub.real; "dangling"; "dir": a link
to a directory) and "fail": update-grub exits 1. Prints JSON, with "files": the drop-in's
type, mode, owner and text after each step."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

PROFILE = """\
[profile]
name = "boot-test"
summary = "kernel command line only"

[bootloader]
# Test: static arguments (the slices' isolation is test_bootloader.py's, on the HGX fixture).
cmdline = ["iommu=pt", "hugepages=64"]
"""

# A grubby that keeps the default kernel's arguments in a file, like BLS entries would.
FAKE_GRUBBY = """#!/usr/bin/env python3
import os, sys
state, log = os.environ["FAKE_BOOT_STATE"], os.environ["FAKE_BOOT_LOG"]
with open(log, "a") as f:
    f.write(" ".join(["grubby", *sys.argv[1:]]) + "\\n")
args = open(state).read().split()
def name(a): return a.split("=", 1)[0]
if sys.argv[1:] == ["--version"]:
    print("grubby version 8.40"); sys.exit(0)
if sys.argv[1:] == ["--info=DEFAULT"]:
    print("index=0\\nkernel=\\"/boot/vmlinuz-6.1\\"")
    print("args=\\"" + " ".join(args) + "\\"\\nroot=\\"/dev/vda1\\"")
    sys.exit(0)
for a in sys.argv[1:]:
    if a.startswith("--remove-args="):
        drop = {name(x) for x in a.split("=", 1)[1].split()}
        args = [x for x in args if name(x) not in drop]
    elif a.startswith("--args="):
        for x in a.split("=", 1)[1].split():
            args = [y for y in args if name(y) != name(x)] + [x]
open(state, "w").write(" ".join(args) + "\\n")
"""

FAKE_UPDATE_GRUB = """#!/bin/sh
echo "update-grub $*" >> "$FAKE_BOOT_LOG"
if [ "$*" != "--version" ] && [ -n "$FAKE_BOOT_FAIL" ]; then exit 1; fi
"""
DROPIN = Path("/etc/default/grub.d/90-mcpnode.cfg")
SITE_TEXT = 'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX site=1"\n'


def lay_dropin(kind: str) -> None:
    """The drop-in as a site might have it before mcpnode's first apply."""
    DROPIN.parent.mkdir(parents=True, exist_ok=True)
    real = Path("/etc/default/grub.real")
    if kind in ("regular", "loose"):
        DROPIN.write_text(SITE_TEXT)
        os.chown(DROPIN, 1234, 5678)
        DROPIN.chmod(0o640 if kind == "regular" else 0o666)
    elif kind == "symlink":
        real.write_text(SITE_TEXT)
        real.chmod(0o644)
        DROPIN.symlink_to(real)
    elif kind == "dangling":
        DROPIN.symlink_to("/etc/default/nowhere.cfg")
    elif kind == "dir":
        Path("/etc/default/grub.dir").mkdir()
        DROPIN.symlink_to("../grub.dir")


def describe(path: Path) -> dict[str, object] | None:
    """Type, mode, owner and text (or link target) of `path`, None when absent."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return {"type": "symlink", "target": os.readlink(path)}
    doc: dict[str, object] = {
        "type": "regular" if stat.S_ISREG(st.st_mode) else "other",
        "mode": stat.S_IMODE(st.st_mode),
        "uid": st.st_uid,
        "gid": st.st_gid,
    }
    if stat.S_ISREG(st.st_mode):
        doc["text"] = path.read_text()
    return doc


def main() -> None:
    params = json.loads(sys.argv[1])
    work, repo = Path(params["work"]), str(params["repo"])
    sys.path.insert(0, repo)
    from tests.support.nschild import private_tmpfs

    private_tmpfs(["/etc/default"])
    bin_dir, state_dir, profiles = work / "bin", work / "state", work / "profiles"
    for d in (bin_dir, state_dir, profiles):
        d.mkdir(parents=True, exist_ok=True)
    (profiles / "boot-test.toml").write_text(PROFILE)
    log, state = work / "calls.log", work / "grubby-args"
    log.write_text("")
    if params["method"] == "grubby":
        (bin_dir / "grubby").write_text(FAKE_GRUBBY)
        state.write_text("ro root=/dev/vda1 quiet iommu=on\n")
    else:
        Path("/etc/default/grub").write_text('GRUB_CMDLINE_LINUX="quiet"\n')
        (bin_dir / "update-grub").write_text(FAKE_UPDATE_GRUB)
        lay_dropin(params.get("dropin", "absent"))
    for fake in bin_dir.iterdir():
        fake.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
        "FAKE_BOOT_LOG": str(log),
        "FAKE_BOOT_STATE": str(state),
        "FAKE_BOOT_FAIL": "1" if params.get("fail") else "",
        "PYTHONPATH": repo,
    }
    for tool in ("grubby", "update-grub", "grub2-mkconfig", "grub-mkconfig"):
        where = shutil.which(tool, path=env["PATH"] + ":/usr/local/sbin:/usr/sbin:/sbin")
        if where is not None and not where.startswith(str(bin_dir)):
            raise RuntimeError(f"a real {tool} is installed ({where}): refusing to run")

    def mcpnode(*args: str) -> dict[str, object]:
        proc = subprocess.run(
            [sys.executable, "-m", "mcpnode", *args, "--profiles-dir", str(profiles)]
            if args[0] in ("apply", "verify")
            else [sys.executable, "-m", "mcpnode", *args],
            capture_output=True, text=True, env=env, timeout=120, check=False,
        )  # fmt: skip
        return {"rc": proc.returncode, "out": proc.stdout, "err": proc.stderr}

    common = ("--root", "/", "--state-dir", str(state_dir))
    steps: dict[str, object] = {}
    files: dict[str, object] = {"before": describe(DROPIN)}
    steps["files"] = files
    steps["apply"] = mcpnode("apply", "--profile", "boot-test", *common)
    files["apply"] = describe(DROPIN)
    files["real"] = describe(Path("/etc/default/grub.real"))
    steps["journal_after_apply"] = (state_dir / "tuning-journal.json").exists()
    steps["dropin"] = DROPIN.read_text() if DROPIN.is_file() else None
    steps["args_after_apply"] = state.read_text().strip() if state.exists() else None
    steps["verify"] = mcpnode("verify", "--profile", "boot-test", *common, "--format", "json")
    steps["rollback"] = mcpnode("rollback", *common)
    files["rollback"] = describe(DROPIN)
    files["real_after_rollback"] = describe(Path("/etc/default/grub.real"))
    steps["dropin_after_rollback"] = Path("/etc/default/grub.d/90-mcpnode.cfg").exists()
    steps["args_after_rollback"] = state.read_text().strip() if state.exists() else None
    steps["calls"] = log.read_text().splitlines()
    print(json.dumps(steps))


if __name__ == "__main__":
    main()
