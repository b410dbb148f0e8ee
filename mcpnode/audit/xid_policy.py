"""Which status an Xid gets: policy, kept apart from the facts (audit/xid_catalog.py) and from
the parser (audit/xid.py). Pure.

Policies (`[audit.xid] policy` in /etc/mcpnode/mcpnode.toml, docs/config.md):
- "nvidia" (the default): NVIDIA's immediate action decides. RESET_GPU, RESTART_BM and every
  other named recovery action (RESTART_VM, CHECK_MECHANICALS, UPDATE_SWFW, the Xid 48 and
  Xid 74 workflows, Xid 154's Drain P2P / Drain and Reset) -> FAIL: the host is not fit to
  serve until someone acts. RESTART_APP, CONTACT_SUPPORT, the Xid 45 workflow, CHECK_UVM, no
  action given (NOT_GIVEN), an Xid the catalogue does not list -> WARN. IGNORE (and Xid 154's
  None) -> INFO.
- "nhc": Azure's NHC fails a node on exactly the Xids of its `check_gpu_xid` list
  (azurehpc-health-checks, customTests/azure_gpu_xid.nhc: 48 56 57 58 62 63 64 65 68 69 73 74
  79 80 81 92 119 120); any other Xid is at most a WARN here, as NHC passes the node.
- `fail`, `warn`, `info`: lists of Xids whose status the site chose, over either policy.

The finding's evidence names what decided (`decide(...).why`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from mcpnode.errors import FileKeyError

Verdict = Literal["FAIL", "WARN", "INFO"]
POLICIES = ("nvidia", "nhc")
OVERRIDE_KEYS = ("fail", "warn", "info")
KEYS = ("policy", *OVERRIDE_KEYS)
MAX_XID = 65535
MAX_OVERRIDES = 512

FAIL_ACTIONS = frozenset(
    {
        "RESET_GPU",
        "RESTART_BM",
        "RESTART_VM",
        "CHECK_MECHANICALS",
        "UPDATE_SWFW",
        "WORKFLOW_XID_48",  # alone: RESET_GPU; with 63/64: DRAIN_AND_RESET
        "WORKFLOW_NVLINK_ERR",  # "a GPU reset or node reboot is needed to clear this error"
        "DRAIN_P2P",
        "DRAIN_AND_RESET",
    }
)
INFO_ACTIONS = frozenset({"IGNORE", "NONE"})
# azurehpc-health-checks customTests/azure_gpu_xid.nhc, XID_EC
NHC_FAIL = frozenset({48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 119, 120})
# NVIDIA k8s-device-plugin internal/rm/health.go: Xids that never mark a GPU unhealthy
DEVICE_PLUGIN_IGNORES = frozenset({13, 31, 43, 45, 68, 109})


class PolicyError(FileKeyError):
    """An `[audit.xid]` table that cannot be used; `key` names the key."""


@dataclass(frozen=True)
class XidPolicy:
    name: str = "nvidia"  # one of POLICIES
    fail: frozenset[int] = frozenset()
    warn: frozenset[int] = frozenset()
    info: frozenset[int] = frozenset()
    source: str | None = None  # the file that set it; None: the default

    def override(self, xid: int) -> Verdict | None:
        if xid in self.fail:
            return "FAIL"
        if xid in self.warn:
            return "WARN"
        if xid in self.info:
            return "INFO"
        return None


DEFAULT = XidPolicy()


@dataclass(frozen=True)
class Decision:
    status: Verdict
    why: str  # which policy decided, and on what
    label: str  # the same in a few words, for a summary line


def nvidia_status(action: str) -> Verdict:
    """The status NVIDIA's immediate action `action` maps to (module docstring)."""
    if action in FAIL_ACTIONS:
        return "FAIL"
    if action in INFO_ACTIONS:
        return "INFO"
    return "WARN"


def decide(policy: XidPolicy, xid: int, action: str, listed: str | None = None) -> Decision:
    """The status of Xid `xid` whose event asks for `action` under `policy`. `action` is the
    catalogue's immediate action, or the one the message itself decodes to (Xid 154's new
    recovery action, an NVLink 5 Xid's severity); `listed` is then the catalogue's, named in
    the reason."""
    chosen = policy.override(xid)
    where = policy.source or "the configuration"
    if chosen is not None:
        key = chosen.lower()
        return Decision(
            chosen, f"site policy: Xid {xid} in [audit.xid] {key} ({where})", f"site policy: {key}"
        )
    nvidia = nvidia_status(action)
    if policy.name == "nhc":
        if xid in NHC_FAIL:
            return Decision(
                "FAIL", "Azure NHC policy: on check_gpu_xid's fail list", "Azure NHC fail list"
            )
        capped: Verdict = "WARN" if nvidia == "FAIL" else nvidia
        return Decision(
            capped,
            f"Azure NHC policy: not on check_gpu_xid's fail list (NVIDIA: {action})",
            f"not on Azure NHC's fail list; NVIDIA: {action}",
        )
    why = f"NVIDIA's Xid Catalog: immediate action {action}"
    if listed is not None and listed != action:
        why = f"NVIDIA's Xid Catalog: immediate action {listed}, for this message {action}"
    return Decision(nvidia, why, f"NVIDIA: {action}")


def _xids(value: object, file: str, key: str) -> frozenset[int]:
    if not isinstance(value, list) or len(value) > MAX_OVERRIDES:
        raise PolicyError(file, key, f"must be a list of Xid numbers (at most {MAX_OVERRIDES})")
    out = set()
    for x in value:
        if isinstance(x, bool) or not isinstance(x, int) or not 1 <= x <= MAX_XID:
            raise PolicyError(file, key, f"{x!r} is not an Xid number (1..{MAX_XID})")
        out.add(x)
    return frozenset(out)


def parse_audit_table(table: object, file: str) -> XidPolicy:
    """The `[audit]` table of mcpnode.toml -> its Xid policy. Raises PolicyError naming the file
    and the key for an unknown key or a value of the wrong type."""
    if not isinstance(table, dict):
        raise PolicyError(file, "audit", f"must be a table ([audit]), not {type(table).__name__}")
    for key in table:
        if key != "xid":
            raise PolicyError(file, f"audit.{key}", "unknown key (keys of [audit]: xid)")
    xid: Any = table.get("xid", {})
    if not isinstance(xid, dict):
        raise PolicyError(file, "audit.xid", "must be a table ([audit.xid])")
    for key in xid:
        if key not in KEYS:
            raise PolicyError(
                file, f"audit.xid.{key}", f"unknown key (keys of [audit.xid]: {', '.join(KEYS)})"
            )
    name = xid.get("policy", "nvidia")
    if name not in POLICIES:
        raise PolicyError(
            file, "audit.xid.policy", f"must be one of {', '.join(POLICIES)}, not {name!r}"
        )
    lists = {k: _xids(xid.get(k, []), file, f"audit.xid.{k}") for k in OVERRIDE_KEYS}
    for i, a in enumerate(OVERRIDE_KEYS):
        for b in OVERRIDE_KEYS[i + 1 :]:
            both = sorted(lists[a] & lists[b])
            if both:
                raise PolicyError(
                    file,
                    f"audit.xid.{b}",
                    f"Xid {', '.join(map(str, both))} is also in audit.xid.{a}",
                )
    return XidPolicy(str(name), lists["fail"], lists["warn"], lists["info"], file)
