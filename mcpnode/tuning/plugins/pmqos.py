"""PM QoS (`[cpu] force_latency`): the CPU latency request, µs. Only a running process can
hold one (it keeps /dev/cpu_dma_latency open: the agent does, agent/enforce.py), so apply
never writes it and verify counts it as drift while it is not held."""

from __future__ import annotations

from mcpnode.errors import HostError
from mcpnode.host import HostReader
from mcpnode.tuning import paths
from mcpnode.tuning.model import HostState, PlanItem, Setting
from mcpnode.tuning.plugins.base import SectionInput, StateDraft, Subsystem, microseconds
from mcpnode.tuning.values import Exact


class PmQos(Subsystem):
    name = "pmqos"
    section = "cpu"
    options = ("force_latency",)
    skipped_is_drift = True
    setting_keys = frozenset((paths.FORCE_LATENCY_KEY,))

    def parse(self, section: SectionInput) -> list[Setting]:
        return microseconds(section, "cpu", "force_latency", paths.FORCE_LATENCY_KEY)

    def read(self, host: HostReader, setting: Setting, draft: StateDraft) -> None:
        try:
            draft.found[self.name] = host.read_cpu_latency()
        except HostError as error:
            draft.found[self.name] = f"cannot read {paths.CPU_DMA_LATENCY}: {error.detail}"

    def plan(self, setting: Setting, state: HostState) -> list[PlanItem]:
        """Satisfied when the latency in force is at most the wanted one (the kernel keeps the
        smallest request); when it is not held this is `skipped` for apply."""
        assert isinstance(setting.desired, Exact)
        want = int(setting.desired.text)
        key, path, src = setting.key, paths.CPU_DMA_LATENCY, setting.source
        rule = f"<= {want} us"
        now = state.found.get(self.name)
        if not isinstance(now, int):
            why = now if isinstance(now, str) and now else f"{path} was not read"
            return [PlanItem(key, path, rule, None, str(want), "skipped", why, src, unread=True)]
        shown = "none requested" if now >= paths.PM_QOS_NONE else f"{now} us"
        if now <= want:
            return [PlanItem(key, path, rule, str(now), str(want), "ok", f"held: {shown}", src)]
        why = f"{shown}: held only while `mcpnode agent` runs (it keeps {path} open)"
        return [PlanItem(key, path, rule, str(now), str(want), "skipped", why, src)]
