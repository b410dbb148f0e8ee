"""Which profile this host is tuned with: one answer for `mcpnode profiles active`, verify, the
audit, the manifest and every exporter (`tuned-adm active` is the peer).

In order, the first that says:
  agent       a running `mcpnode agent` (its state file, /run/mcpnode/agent.json, with a live
              pid): the profile it enforces, configured or adopted from an operator's apply;
  journal     the tuning journal: the profile `mcpnode apply` (or the agent) applied and that is
              still applied (no rollback since);
  persisted   the `# profile: NAME` header of /etc/sysctl.d/90-mcpnode.conf (`apply --persist`
              wrote it; the journal is gone, e.g. /var/lib was reset, but boot applies it);
  configured  the agent config's `[tuning] profile` (/etc/mcpnode/mcpnode.toml): chosen, but
              *not applied* — checking against it shows what applying it would change;
  none        nothing says: the host is not tuned by mcpnode. Tuning checks are INFO, not FAIL.

A journal that exists but cannot be read or trusted stops the chain (`problem`): it is the
authority on what was applied, and guessing past it could name a profile nobody applied.
Reads only, through Host; never takes the state lock.
"""

from __future__ import annotations

from mcpnode.codec import toml_bounded
from mcpnode.errors import HostError, PathNotFound
from mcpnode.host import Host
from mcpnode.state.active import ActiveProfile
from mcpnode.state.agentstate import read_agent_state
from mcpnode.tuning import paths
from mcpnode.tuning.errors import JournalError
from mcpnode.tuning.journal import JournalStore
from mcpnode.tuning.profile import PROFILE_NAME

CONFIG_PATH = "/etc/mcpnode/mcpnode.toml"
# The agent config's own cap (agent/config.py); its default profile when [tuning] omits it.
MAX_CONFIG_BYTES = 1 << 20
CONFIG_DEFAULT_PROFILE = "base"


def active_profile(
    host: Host, store: JournalStore | None = None, config_path: str = CONFIG_PATH
) -> ActiveProfile:
    """Resolve the active profile of the machine behind `host` (module docstring). `store`:
    where the journal lives (default: /var/lib/mcpnode under `host`)."""
    store = store if store is not None else JournalStore(host)
    try:
        journal = store.load()
    except JournalError as err:
        return ActiveProfile(None, "journal", False, "", problem=str(err))
    applied = journal.applied if journal is not None else None

    agent = read_agent_state(host)
    if agent is not None and agent.profile is not None:
        how = (
            "adopted from an operator's apply"
            if agent.profile_source == "adopted"
            else (f"configured in {agent.config}")
        )
        same = applied is not None and applied.profile == agent.profile
        return ActiveProfile(
            agent.profile,
            "agent",
            True,
            f"mcpnode agent pid {agent.pid}, {how}",
            applied.by if same and applied else "agent",
            applied.at if same and applied else None,
            applied.hash if same and applied else None,
        )

    if journal is not None and applied is not None:
        interrupted = journal.state != "applied"
        detail = f"applied by {'the agent' if applied.by == 'agent' else 'mcpnode apply'}"
        if applied.at:
            detail += f" at {applied.at}"
        if interrupted:
            detail += (
                f"; a run stopped half-way ({journal.state}): the next apply or rollback "
                "restores the originals first"
            )
        return ActiveProfile(
            applied.profile,
            "journal",
            not interrupted,
            detail,
            applied.by,
            applied.at,
            applied.hash,
        )

    persisted = _persisted_header(host)
    if persisted is not None:
        return ActiveProfile(
            persisted,
            "persisted",
            True,
            f"named by {paths.PERSIST_PATH} (no journal: applied at boot by systemd-sysctl)",
        )

    configured, why = _configured(host, config_path)
    if configured is not None:
        return ActiveProfile(configured, "configured", False, f"{why}; configured, not applied")
    return ActiveProfile(None, "none", False, why or "no profile applied or configured")


def _persisted_header(host: Host) -> str | None:
    """The `# profile: NAME` line render_conf writes near the top of the persisted file."""
    try:
        text = host.read_optional(paths.PERSIST_PATH, limit=1 << 16)
    except HostError:
        return None
    for line in (text or "").splitlines()[:5]:
        if line.startswith("# profile:"):
            words = line.split(":", 1)[1].split()
            if words and PROFILE_NAME.match(words[0]):
                return words[0]
    return None


def _configured(host: Host, config_path: str) -> tuple[str | None, str]:
    """The agent config's profile and where it came from, or (None, why not). Paths are named
    as logical paths, so a snapshot's replay says what the host said."""
    shown = config_path
    try:
        data = host.read_trusted(config_path, MAX_CONFIG_BYTES)
    except PathNotFound:
        return None, f"no {shown}"
    except HostError as err:
        return None, f"{shown} cannot be used ({err.detail})"
    try:
        doc = toml_bounded.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, toml_bounded.TomlRejected) as err:
        return None, f"{shown} is not valid TOML ({err})"
    tuning = doc.get("tuning", {})
    name = tuning.get("profile", CONFIG_DEFAULT_PROFILE) if isinstance(tuning, dict) else None
    if not isinstance(name, str) or not PROFILE_NAME.match(name):
        return None, f"{shown}: tuning.profile is not a profile name"
    return name, f"[tuning] profile in {shown}"
