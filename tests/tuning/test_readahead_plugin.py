"""`[storage] read_ahead_kb` by mount point and device name, against a root laid out like a
host with an NVMe disk (/ on partition 2, /models on a whole second disk), a device-mapper
volume, tmpfs and an NFS mount: plan, apply, verify, rollback, the agent's drift remediation and
hostile values."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mcpnode.host import Host
from mcpnode.tuning.apply import apply_profile, rollback
from mcpnode.tuning.errors import ProfileError
from mcpnode.tuning.journal import JournalStore
from mcpnode.tuning.plan import plan
from mcpnode.tuning.profile import load_profile, parse_profile
from mcpnode.tuning.state import read_state
from mcpnode.tuning.verify import verify
from tests.support.agentproc import AgentProc
from tests.support.powerroot import agent_profile, planned
from tests.support.tuningroot import build, kernel_view, put

PCI = "sys/devices/pci0000:00/0000:00:1d.0/nvme"
# /proc/self/mountinfo as 6.x prints it (id parent major:minor root point options - fs src opts)
MOUNTINFO = """\
22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw
23 22 259:3 / /models rw,relatime shared:2 - xfs /dev/nvme1n1 rw
24 22 253:0 / /var/lib/containers rw,relatime shared:3 - xfs /dev/mapper/vg-data rw
25 22 0:26 / /dev/shm rw,nosuid,nodev shared:4 - tmpfs tmpfs rw
26 22 0:51 / /mnt/weights rw,relatime shared:5 - nfs4 server:/export rw
"""

PROFILE = """\
[profile]
summary = "readahead"

[storage]
read_ahead_kb = { min = 4096 }
devices = ["/", "/models", "/var/lib/containers", "/dev/shm", "/mnt/weights", "/srv", "nvme0n1"]
"""


def disk_root(root: Path) -> Path:
    build(root, sysctls={}, policies=0)
    put(root, "proc/self/mountinfo", MOUNTINFO)
    devices = {
        "nvme0n1": (f"{PCI}/nvme0/nvme0n1", "259:0"),
        "nvme1n1": (f"{PCI}/nvme1/nvme1n1", "259:3"),
        "dm-0": ("sys/devices/virtual/block/dm-0", "253:0"),
    }
    (root / "sys/block").mkdir(parents=True)
    (root / "sys/dev/block").mkdir(parents=True)
    for name, (where, numbers) in devices.items():
        put(root, f"{where}/queue/read_ahead_kb", "128\n")
        put(root, f"{where}/dev", numbers + "\n")
        os.symlink(f"../{where[len('sys/') :]}", root / f"sys/block/{name}")
        os.symlink(f"../../{where[len('sys/') :]}", root / f"sys/dev/block/{numbers}")
    part = f"{PCI}/nvme0/nvme0n1/nvme0n1p2"
    put(root, f"{part}/partition", "2\n")
    put(root, f"{part}/dev", "259:2\n")
    os.symlink(f"../../{part[len('sys/') :]}", root / "sys/dev/block/259:2")
    return root


def test_mounts_and_names_resolve_to_their_disks(tmp_path: Path) -> None:
    root = disk_root(tmp_path / "root")
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "ra.toml").write_text(PROFILE)
    host = Host(root)
    profile = load_profile("ra", host, profiles)
    items = plan(profile, read_state(host, profile)).items
    sets = [(i.key, i.action) for i in items if i.action == "set"]
    # "/" is nvme0n1p2: its disk nvme0n1, named again by device: one item.
    assert sets == [
        ("storage:read_ahead_kb:nvme0n1", "set"),
        ("storage:read_ahead_kb:nvme1n1", "set"),
        ("storage:read_ahead_kb:dm-0", "set"),
    ]
    reasons = sorted(i.reason for i in items if i.action == "unsupported")
    assert reasons == [
        "/dev/shm is tmpfs, on no block device",
        "/mnt/weights is nfs4, on no block device",
        "nothing is mounted at /srv (/proc/self/mountinfo)",
    ]
    before = kernel_view(root)
    apply_profile(host, profile, JournalStore(host))
    assert (root / f"{PCI}/nvme1/nvme1n1/queue/read_ahead_kb").read_text() == "4096\n"
    assert verify(host, profile).drift == ()
    (root / f"{PCI}/nvme0/nvme0n1/queue/read_ahead_kb").write_text("8192\n")
    assert verify(host, profile).drift == ()  # at least: a larger value is kept
    (root / f"{PCI}/nvme0/nvme0n1/queue/read_ahead_kb").write_text("4096\n")
    rollback(host, JournalStore(host))
    assert {k: v for k, v in kernel_view(root).items() if not k.startswith("var")} == before


def test_the_agent_puts_readahead_back(tmp_path: Path) -> None:
    root = disk_root(tmp_path / "root")
    agent_profile(root, "ra", PROFILE)
    queue = root / f"{PCI}/nvme1/nvme1n1/queue/read_ahead_kb"
    agent = AgentProc(["--root", str(root)], tmp_path, watchdog_usec=None)
    try:
        agent.wait_message("READY=1")
        assert queue.read_text() == "4096\n"
        t = agent.now()
        queue.write_text("128\n")
        event = agent.wait_event("drift.remediated", t, key="storage:read_ahead_kb:nvme1n1")
        rc = agent.stop()
    finally:
        agent.close()
    assert rc == 0 and event["old"] == "128" and event["new"] == "4096"
    assert queue.read_text() == "4096\n"


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("read_ahead_kb = 4096", "must list 1 to 64 mount points"),
        ('devices = ["/"]', "nothing to set"),
        ('read_ahead_kb = -1\ndevices = ["/"]', "must be KiB"),
        ('read_ahead_kb = true\ndevices = ["/"]', "must be KiB"),
        ('read_ahead_kb = 1048577\ndevices = ["/"]', "must be KiB"),
        ('read_ahead_kb = { min = "4096" }\ndevices = ["/"]', "must be KiB"),
        ('read_ahead_kb = 4096\ndevices = ["../etc"]', "is not a mount point or device"),
        ('read_ahead_kb = 4096\ndevices = ["/a/../../etc"]', "is not a mount point or device"),
        ('read_ahead_kb = 4096\ndevices = [".."]', "is not a mount point or device"),
        ('read_ahead_kb = 4096\ndevices = ["sd a"]', "is not a mount point or device"),
        ("read_ahead_kb = 4096\ndevices = [3]", "is not a mount point or device"),
        ('read_ahead_kb = 4096\ndevices = "/"', "must list 1 to 64"),
        (f"read_ahead_kb = 4096\ndevices = {['/'] * 65}", "must list 1 to 64"),
    ],
)
def test_hostile_storage_values(body: str, why: str) -> None:
    text = f'[profile]\nsummary = "x"\n[storage]\n{body}\n'
    with pytest.raises(ProfileError, match=why) as raised:
        parse_profile(text, "/etc/mcpnode/profiles/bad.toml", "bad")
    assert "bad.toml: [storage]" in str(raised.value)


def test_a_device_link_out_of_sys_resolves_inside_the_root_to_nothing(tmp_path: Path) -> None:
    root = disk_root(tmp_path / "root")
    (root / "sys/dev/block/259:3").unlink()
    os.symlink("/etc", root / "sys/dev/block/259:3")
    text = '[profile]\nsummary = "x"\n[storage]\nread_ahead_kb = 4096\ndevices = ["/models"]\n'
    items = planned(tmp_path, root, text)
    assert [(i.key, i.action) for i in items] == [("storage:read_ahead_kb:etc", "unsupported")]
