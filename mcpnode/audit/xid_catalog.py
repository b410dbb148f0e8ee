"""NVIDIA's Xid Catalog as data: every Xid it lists, its name, its immediate and investigatory
action, the GPUs it applies to and the driver from which it is linked to Xid 154. Pure data
and lookups; no verdicts (audit/xid_policy.py turns an action into a status).

Source, for every row: NVIDIA, "Analyzing Xid Errors with the Xid Catalog",
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html (the "Xids" sheet:
Type, Code, Mnemonic, Description, Applies to A100/H100/B100/GB200, Resolution Bucket
(Immediate Action), Resolution Bucket (Investigatory Action), Xid 154 linkage), in the edition
that lists Xids 1-172 and decodes Xids 144-150 for drivers before and from R575
(CATALOG_VERSION). Nothing here is guessed: where the catalogue gives no immediate action
(Xids 162-172) the row says None, and an Xid the catalogue does not list is reported as such.

Xid 144-150 (NVLink 5) carry their own severity in the message ("Fatal" / "Non-fatal"), decoded
by the catalogue's "XID 144-150 Decode" sheet: a Fatal or Link Fatal entry asks for RESET_GPU,
the non-fatal ones for IGNORE or "XID_154_EVAL" (follow the Xid 154 that comes with it, else
restart the application). Xid 154 names its own action (NVML's nvmlGpuRecoveryAction_t).

Volta and older GPUs have their own catalogue (https://docs.nvidia.com/deploy/xid-errors/
archive/index.html); this one marks their Xids "Unused" with CONTACT_SUPPORT.
"""

from __future__ import annotations

from dataclasses import dataclass

CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
CATALOG_VERSION = "the Xid Catalog listing Xids 1-172 (R575 decode of Xids 144-150)"

# The catalogue's "Applies to" columns
A100, H100, B100, GB200 = "A100", "H100", "B100", "GB200"
ALL = (A100, H100, B100, GB200)
HOPPER_ON = (H100, B100, GB200)
BLACKWELL = (B100, GB200)

# Fault Resolution Buckets (the catalogue's "Guidance Classes" sheet), as NVIDIA words them
BUCKET_TEXT: dict[str, str] = {
    "CONTACT_SUPPORT": "contact your support organization for further investigation",
    "RESTART_APP": "restart the application; a GPU reset or node restart is not deemed necessary",
    "IGNORE": "no action required",
    "RESET_GPU": "reset the GPU; restarting the bare-metal node is not deemed necessary",
    "RESTART_BM": "restart the bare-metal node",
    "RESTART_VM": "restart the VM owning the GPU; a GPU reset or node restart is not deemed "
    "necessary",
    "CHECK_MECHANICALS": "check that the board is seated and every connection to it is secure",
    "UPDATE_SWFW": "update the firmware and the software to their latest versions",
    "WORKFLOW_XID_45": "alone: restart Fabric Manager; with other Xids: follow those",
    "WORKFLOW_XID_48": "alone: reset the GPU; with Xid 63 or 64: drain and reset",
    "WORKFLOW_NVLINK_ERR": "decode the seven registers of the message; a GPU reset or node "
    "reboot is needed to clear the error",
    "WORKFLOW_NVLINK5_ERR": "decode the message's IntrInfo and Error Status (sheet \"XID "
    '144-150 Decode")',
    "XID_154": "follow the recovery action Xid 154 reports",
    "XID_154_EVAL": "take the action of the Xid 154 seen with it; without one, restart the "
    "application",
    "CHECK_UVM": "reset the GPU if UVM or vGPU is in use, else no action",
    "NOT_GIVEN": "NVIDIA's catalogue gives no immediate action for it",
    # Xid 154's recovery actions (NVML nvmlGpuRecoveryAction_t)
    "NONE": "no recovery action needed",
    "DRAIN_P2P": "stop every GPU process that does peer-to-peer traffic, then look again",
    "DRAIN_AND_RESET": "drain the GPU's work, then reset it",
}


@dataclass(frozen=True)
class XidInfo:
    """One row of the Xid Catalog (or, `known` False, an Xid it does not list)."""

    xid: int
    mnemonic: str  # nverror.h's name: ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS
    name: str  # the catalogue's Description ("Unused": deprecated, or Volta and older)
    immediate: str | None  # Resolution Bucket (Immediate Action); None: the catalogue gives none
    investigatory: str | None  # Resolution Bucket (Investigatory Action)
    applies_to: tuple[str, ...]  # of A100 H100 B100 GB200; () for an unused Xid
    linked_since: str | None = None  # Xid 154 linkage: the driver from which it raises 154
    known: bool = True

    @property
    def action(self) -> str:
        """The immediate action; NOT_GIVEN where the catalogue gives none (or has no row)."""
        return self.immediate or "NOT_GIVEN"

    @property
    def cause(self) -> str:
        """The catalogue names no cause; this is its investigatory action (what to look at if
        the Xid recurs), the field the agent's log line calls `cause`."""
        return self.investigatory or "none given"

    @property
    def unused(self) -> bool:
        return self.known and not self.applies_to


_UNUSED = (
    (1, "ROBUST_CHANNEL_FIFO_ERROR_FIFO_METHOD"),
    (2, "ROBUST_CHANNEL_FIFO_ERROR_SW_METHOD"),
    (3, "ROBUST_CHANNEL_FIFO_ERROR_UNK_METHOD"),
    (4, "ROBUST_CHANNEL_FIFO_ERROR_CHANNEL_BUSY"),
    (5, "ROBUST_CHANNEL_FIFO_ERROR_RUNOUT_OVERFLOW"),
    (6, "ROBUST_CHANNEL_FIFO_ERROR_PARSE_ERR"),
    (7, "ROBUST_CHANNEL_FIFO_ERROR_PTE_ERR"),
    (9, "ROBUST_CHANNEL_GR_ERROR_INSTANCE"),
    (10, "ROBUST_CHANNEL_GR_ERROR_SINGLE_STEP"),
    (12, "ROBUST_CHANNEL_GR_ERROR_SW_METHOD"),
    (15, "ROBUST_CHANNEL_SCANLINE_TIMEOUT"),
    (16, "ROBUST_CHANNEL_VBLANK_CALLBACK_TIMEOUT"),
    (17, "ROBUST_CHANNEL_PARAMETER_ERROR"),
    (18, "ROBUST_CHANNEL_BUS_MASTER_TIMEOUT_ERROR"),
    (19, "ROBUST_CHANNEL_DISP_MISSED_NOTIFIER"),
    (20, "ROBUST_CHANNEL_MPEG_ERROR_SW_METHOD"),
    (21, "ROBUST_CHANNEL_ME_ERROR_SW_METHOD"),
    (22, "ROBUST_CHANNEL_VP_ERROR_SW_METHOD"),
    (23, "ROBUST_CHANNEL_RC_LOGGING_ENABLED"),
    (24, "ROBUST_CHANNEL_GR_SEMAPHORE_TIMEOUT"),
    (26, "ROBUST_CHANNEL_FIFO_ERROR_FBISTATE_TIMEOUT"),
    (27, "ROBUST_CHANNEL_VP_ERROR"),
    (28, "ROBUST_CHANNEL_VP2_ERROR"),
    (29, "ROBUST_CHANNEL_BSP_ERROR"),
    (30, "ROBUST_CHANNEL_BAD_ADDR_ACCESS"),
    (33, "ROBUST_CHANNEL_SEC_ERROR"),
    (34, "ROBUST_CHANNEL_MSVLD_ERROR"),
    (35, "ROBUST_CHANNEL_MSPDEC_ERROR"),
    (36, "ROBUST_CHANNEL_MSPPP_ERROR"),
    (42, "ROBUST_CHANNEL_VIC_ERROR"),
    (47, "ROBUST_CHANNEL_NVENC0_ERROR"),
    (49, "SILENT_RUNNING_CONSTANT_LEVEL_SET_BY_REGISTRY"),
    (50, "SILENT_RUNNING_LEVEL_TRANSITION_DUE_TO_RC_ERROR"),
    (51, "SILENT_RUNNING_STRESS_TEST_FAILURE"),
    (52, "SILENT_RUNNING_LEVEL_TRANS_DUE_TO_TEMP_RISE"),
    (53, "SILENT_RUNNING_TEMP_REDUCED_CLOCKING"),
    (55, "SILENT_RUNNING_TEMPERATURE_READ_ERROR"),
    (56, "DISPLAY_CHANNEL_EXCEPTION"),
    (57, "FB_LINK_TRAINING_FAILURE_ERROR"),
    (58, "FB_MEMORY_ERROR"),
    (59, "PMU_ERROR"),
    (61, "PMU_BREAKPOINT"),
    (65, "ROBUST_CHANNEL_NVENC1_ERROR"),
    (73, "ROBUST_CHANNEL_NVENC2_ERROR"),
    (81, "ROBUST_CHANNEL_VGA_SUBSYSTEM_ERROR"),
    (87, "NVTELEMETRY_DRIVER_REPORT"),
    (90, "LTC_ERROR"),
    (91, "RESERVED_XID"),
    (111, "BUNDLE_ERROR_EVENT"),
    (112, "DISP_SUPERVISOR_ERROR"),
    (113, "DP_LT_FAILURE"),
    (114, "HEAD_RG_UNDERFLOW"),
    (115, "CORE_CHANNEL_REGS"),
    (116, "WINDOW_CHANNEL_REGS"),
    (117, "CURSOR_CHANNEL_REGS"),
    (118, "HEAD_REGS"),
    (122, "SPI_PMU_RPC_READ_FAIL"),
    (123, "SPI_PMU_RPC_WRITE_FAIL"),
    (124, "SPI_PMU_RPC_ERASE_FAIL"),
    (125, "INFOROM_FS_ERROR"),
    (138, "ROBUST_CHANNEL_DLA_ERROR"),
)

_R565, _R570, _R575 = "R565", "R570", "R575"
_CS, _APP, _IGN = "CONTACT_SUPPORT", "RESTART_APP", "IGNORE"
_CUDA = "CHECK_APP/CUDA"
_SYMP = "IGNORE (sympathetic)"
_NVL5 = "WORKFLOW_NVLINK5_ERR"

# (xid, mnemonic, description, immediate, investigatory, applies to, Xid 154 linkage since)
# fmt: off
_ROWS: tuple[tuple[int, str, str, str | None, str | None, tuple[str, ...], str | None], ...] = (
    (8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", _APP, _CS, ALL, None),
    (11, "ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "Invalid or corrupted push buffer stream", _APP,
     _CUDA, ALL, None),
    (13, "ROBUST_CHANNEL_GR_EXCEPTION", "Graphics Engine Exception", _APP, "WORKFLOW_XID_13",
     ALL, None),
    (14, "ROBUST_CHANNEL_FAKE_ERROR", "Unused (a fake or injected error from userspace)", _IGN,
     _CS, ALL, None),
    (25, "ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY", "Invalid or illegal push buffer stream", _APP,
     _CUDA, ALL, None),
    (31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault", _APP,
     "WORKFLOW_XID_31", ALL, None),
    (32, "ROBUST_CHANNEL_PBDMA_ERROR", "Invalid or corrupted push buffer stream", _APP, _CUDA,
     ALL, None),
    (37, "ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD", "Driver firmware error", _IGN, _CUDA,
     ALL, None),
    (38, "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "Driver firmware error", _IGN, _CS, ALL,
     None),
    (39, "ROBUST_CHANNEL_CE0_ERROR", "Copy Engine Exception", _APP, _CS, ALL, None),
    (40, "ROBUST_CHANNEL_CE1_ERROR", "Copy Engine Exception", _APP, _CS, ALL, None),
    (41, "ROBUST_CHANNEL_CE2_ERROR", "Copy Engine Exception", _APP, _CS, ALL, None),
    (43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing", _IGN, _CS, ALL,
     None),
    (44, "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "Graphics Engine fault during context switch",
     _IGN, _CS, ALL, None),
    (45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "Preemptive cleanup, due to previous errors",
     "WORKFLOW_XID_45", "Solo: RESTART_FM; not solo: IGNORE (follow the other Xid)", ALL, None),
    (46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing", "RESET_GPU", _CS, ALL,
     None),
    (48, "ROBUST_CHANNEL_GPU_ECC_DBE", "Double Bit ECC Error", "WORKFLOW_XID_48",
     "WORKFLOW_XID_48", ALL, _R565),
    (54, "SILENT_RUNNING_PWR_REDUCED_CLOCKING",
     "Auxiliary power is not connected to the GPU board", "CHECK_MECHANICALS", _CS,
     (A100, H100, B100), None),
    (60, "ROBUST_CHANNEL_SEC2_ERROR", "Video processor exception", _APP, "INVESTIGATE_SW", ALL,
     None),
    (62, "PMU_HALT_ERROR", "Internal micro-controller halt", "RESET_GPU", _CS, ALL, _R565),
    (63, "INFOROM_DRAM_RETIREMENT_EVENT", "GPU memory remapping event", _IGN, _IGN, ALL, _R565),
    (64, "INFOROM_DRAM_RETIREMENT_FAILURE", "GPU memory remapping failure", "RESET_GPU", _CS,
     ALL, _R565),
    (66, "ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION", "Illegal access by driver", _IGN,
     "INVESTIGATE_SW", ALL, None),
    (67, "ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION", "Illegal access by driver", _IGN, _CS, ALL,
     None),
    (68, "ROBUST_CHANNEL_NVDEC0_ERROR", "NVDEC0 Exception", _APP, _CS, ALL, None),
    (69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics Engine class error", _APP, _CUDA, ALL, None),
    (70, "ROBUST_CHANNEL_CE3_ERROR", "CE3: Unknown Error", _APP, _CS, ALL, None),
    (71, "ROBUST_CHANNEL_CE4_ERROR", "CE4: Unknown Error", _APP, _CS, ALL, None),
    (72, "ROBUST_CHANNEL_CE5_ERROR", "CE5: Unknown Error", _APP, _CS, ALL, None),
    (74, "NVLINK_ERROR", "NVLINK Error", "WORKFLOW_NVLINK_ERR", _CS, (A100, H100), _R565),
    (75, "ROBUST_CHANNEL_CE6_ERROR", "CE6: Unknown Error", _APP, _CS, ALL, None),
    (76, "ROBUST_CHANNEL_CE7_ERROR", "CE7: Unknown Error", _APP, _CS, ALL, None),
    (77, "ROBUST_CHANNEL_CE8_ERROR", "CE8: Unknown Error", _APP, _CS, ALL, None),
    (78, "VGPU_START_ERROR", "vGPU Start Error", "UPDATE_SWFW", "UPDATE_SWFW", ALL, None),
    (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus",
     "RESTART_BM", _CS, ALL, _R565),
    (80, "PBDMA_PUSHBUFFER_CRC_MISMATCH", "Corrupted data sent to GPU", _APP, _CUDA,
     (A100, H100), None),
    (82, "ROBUST_CHANNEL_NVJPG0_ERROR", "NVJPG0 Error", _APP, _CS, ALL, None),
    (83, "ROBUST_CHANNEL_NVDEC1_ERROR", "NVDEC1 Error", _APP, _CS, ALL, None),
    (84, "ROBUST_CHANNEL_NVDEC2_ERROR", "NVDEC2 Error", _APP, _CS, ALL, None),
    (85, "ROBUST_CHANNEL_CE9_ERROR", "CE9: Unknown Error", _APP, _CS, ALL, None),
    (86, "ROBUST_CHANNEL_OFA0_ERROR", "OFA Exception", _APP, _CS, ALL, None),
    (88, "ROBUST_CHANNEL_NVDEC3_ERROR", "NVDEC3 Error", _APP, _CS, ALL, None),
    (89, "ROBUST_CHANNEL_NVDEC4_ERROR", "NVDEC4 Error", _APP, _CS, ALL, None),
    (92, "EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", _IGN, _CS, ALL, None),
    (93, "INFOROM_ERASE_LIMIT_EXCEEDED", "Non-fatal violation of provisioned InfoROM wear limit",
     _IGN, _CS, (A100,), None),
    (94, "ROBUST_CHANNEL_CONTAINED_ERROR", "Contained memory error", _APP, _SYMP, ALL, _R565),
    (95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained memory error", "RESET_GPU", _SYMP,
     ALL, _R565),
    (96, "ROBUST_CHANNEL_NVDEC5_ERROR", "NVDEC5 Error", _APP, _CS, HOPPER_ON, None),
    (97, "ROBUST_CHANNEL_NVDEC6_ERROR", "NVDEC6 Error", _APP, _CS, HOPPER_ON, None),
    (98, "ROBUST_CHANNEL_NVDEC7_ERROR", "NVDEC7 Error", _APP, _CS, HOPPER_ON, None),
    (99, "ROBUST_CHANNEL_NVJPG1_ERROR", "NVJPG1 Error", _APP, _CS, HOPPER_ON, None),
    (100, "ROBUST_CHANNEL_NVJPG2_ERROR", "NVJPG2 Error", _APP, _CS, HOPPER_ON, None),
    (101, "ROBUST_CHANNEL_NVJPG3_ERROR", "NVJPG3 Error", _APP, _CS, HOPPER_ON, None),
    (102, "ROBUST_CHANNEL_NVJPG4_ERROR", "NVJPG4 Error", _APP, _CS, HOPPER_ON, None),
    (103, "ROBUST_CHANNEL_NVJPG5_ERROR", "NVJPG5 Error", _APP, _CS, HOPPER_ON, None),
    (104, "ROBUST_CHANNEL_NVJPG6_ERROR", "NVJPG6 Error", _APP, _CS, HOPPER_ON, None),
    (105, "ROBUST_CHANNEL_NVJPG7_ERROR", "NVJPG7 Error", _APP, _CS, HOPPER_ON, None),
    (106, "SMBPBI_TEST_MESSAGE", "SMBPBI Test Message", _IGN, _IGN, ALL, None),
    (107, "SMBPBI_TEST_MESSAGE_SILENT", "SMBPBI Test Message Silent", _IGN, _IGN, ALL, None),
    (108, "NVLINK_REMOTE_TRANSLATION_ERROR", "Unused", _IGN, "XID_137_FLOW", ALL, None),
    (109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "Context Switch Timeout Error", "RESET_GPU", _CS,
     ALL, _R570),
    (110, "SEC_FAULT_ERROR", "Security Fault Error", "RESET_GPU", "INVESTIGATE_SW", HOPPER_ON,
     _R565),
    (119, "GSP_RPC_TIMEOUT", "GSP RPC Timeout", "RESET_GPU", "INVESTIGATE_SW", ALL, None),
    (120, "GSP_ERROR", "GSP Error", "RESET_GPU", "INVESTIGATE_SW", ALL, _R565),
    (121, "C2C_ERROR", "C2C Error", _IGN, _CS, (GB200,), None),
    (126, "ROBUST_CHANNEL_CE10_ERROR", "CE10: Unknown Error", _APP, _CS, BLACKWELL, None),
    (127, "ROBUST_CHANNEL_CE11_ERROR", "CE11: Unknown Error", _APP, _CS, BLACKWELL, None),
    (128, "ROBUST_CHANNEL_CE12_ERROR", "CE12: Unknown Error", _APP, _CS, BLACKWELL, None),
    (129, "ROBUST_CHANNEL_CE13_ERROR", "CE13: Unknown Error", _APP, _CS, BLACKWELL, None),
    (130, "ROBUST_CHANNEL_CE14_ERROR", "CE14: Unknown Error", _APP, _CS, BLACKWELL, None),
    (131, "ROBUST_CHANNEL_CE15_ERROR", "CE15: Unknown Error", _APP, _CS, BLACKWELL, None),
    (132, "ROBUST_CHANNEL_CE16_ERROR", "CE16: Unknown Error", _APP, _CS, BLACKWELL, None),
    (133, "ROBUST_CHANNEL_CE17_ERROR", "CE17: Unknown Error", _APP, _CS, BLACKWELL, None),
    (134, "ROBUST_CHANNEL_CE18_ERROR", "CE18: Unknown Error", _APP, _CS, BLACKWELL, None),
    (135, "ROBUST_CHANNEL_CE19_ERROR", "CE19: Unknown Error", _APP, _CS, BLACKWELL, None),
    (136, "ALI_TRAINING_FAIL", "Link Training Failed", "RESET_GPU", "INVESTIGATE_LINK_SI",
     (H100,), _R565),
    (137, "NVLINK_PRIV_ERR", "NVLink Privilege Error", _IGN, "XID_137_FLOW", ALL, None),
    (139, "ROBUST_CHANNEL_OFA1_ERROR", "OFA1 Error", _APP, _CS, BLACKWELL, None),
    (140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC Unrecovered Error", "RESET_GPU", _CS, ALL,
     None),
    (141, "ROBUST_CHANNEL_FAST_PATH_ERROR", "CUDA Fast Path Error", _IGN, _CS, HOPPER_ON, None),
    (142, "ROBUST_CHANNEL_NVENC3_ERROR", "NVENC3 Error", _CS, None, (GB200,), None),
    (143, "GPU_INIT_ERROR", "GPU Initialization Error", "RESET_GPU", _CS, HOPPER_ON, _R575),
    (144, "NVLINK_SAW_ERROR", "NVLINK: SAW Error", _NVL5, _NVL5, BLACKWELL, _R565),
    (145, "NVLINK_RLW_ERROR", "NVLINK: RLW Error", _NVL5, _NVL5, BLACKWELL, _R565),
    (146, "NVLINK_TLW_ERROR", "NVLINK: TLW Error", _NVL5, _NVL5, BLACKWELL, _R565),
    (147, "NVLINK_TREX_ERROR", "NVLINK: TREX Error", _NVL5, _NVL5, BLACKWELL, _R565),
    (148, "NVLINK_NVLPW_CTRL_ERROR", "NVLINK: NVLPW_CTRL Error", _NVL5, _NVL5, BLACKWELL, _R565),
    (149, "NVLINK_NETIR_ERROR", "NVLINK: NETIR Error", _NVL5, _NVL5, BLACKWELL, _R565),
    (150, "NVLINK_MSE_ERROR", "NVLINK: MSE Error", _NVL5, _NVL5, BLACKWELL, _R565),
    (151, "ROBUST_CHANNEL_KEY_ROTATION_ERROR", "Key rotation Error", "RESTART_VM", _CS,
     HOPPER_ON, None),
    (152, "ROBUST_CHANNEL_DLA_SMMU_ERROR", "DLA SMMU Error", _IGN, _CS, (), None),
    (153, "ROBUST_CHANNEL_DLA_TIMEOUT", "DLA timeout Error", _IGN, _CS, (), None),
    (154, "GPU_RECOVERY_ACTION_CHANGED", "GPU Recovery Action Changed", "XID_154",
     "N/A: informational, about another Xid", ALL, None),
    (155, "NVLINK_SW_DEFINED_ERROR", "NVLINK: SW Defined Error", "RESET_GPU",
     "INVESTIGATE_SW_USER", BLACKWELL, _R565),
    (156, "RESOURCE_RETIREMENT_EVENT", "Resource Retirement Event", "RESET_GPU", _IGN,
     HOPPER_ON, _R565),
    (157, "RESOURCE_RETIREMENT_FAILURE", "Resource Retirement Failure", _IGN, _CS, HOPPER_ON,
     None),
    (158, "GPU_FATAL_TIMEOUT", "GPU Fatal Timeout", "RESET_GPU", _CS, ALL, None),
    (159, "ROBUST_CHANNEL_CHI_NON_DATA_ERROR", "CHI Non-Data Error", "CHECK_UVM",
     "SYMPATHETIC_REPORT_SOLO", BLACKWELL, None),
    (160, "CHANNEL_RETIREMENT_EVENT", "Channel Retirement Event", _IGN, "INVESTIGATE_SW",
     BLACKWELL, _R575),
    (161, "CHANNEL_RETIREMENT_FAILURE", "Channel Retirement Failure", _IGN, "INVESTIGATE_SW",
     BLACKWELL, _R575),
    (162, "PSHC_REENGAGED", "Power Smoothing HW Circuitry capability reengaged", None, None,
     BLACKWELL, None),
    (163, "PSHC_DISENGAGED", "Power Smoothing HW Circuitry capability disengaged", None, None,
     BLACKWELL, None),
    (164, "PSHC_LOW_LIFETIME", "Power Smoothing HW Circuitry low lifetime reached", None, None,
     BLACKWELL, None),
    (165, "PSHC_ZERO_LIFETIME", "Power Smoothing HW Circuitry lifetime exhausted", None, None,
     BLACKWELL, None),
    (166, "NVLINK_SECURE_CRYPTO_ERR",
     "CC traffic seen prior to link properly being configured for encrypted traffic", None,
     None, BLACKWELL, None),
    (167, "PCIE_FATAL_TIMEOUT", "PCIE_FATAL_TIMEOUT", None, None, HOPPER_ON, None),
    (168, "REDUCED_GPU_MEMORY_CAPACITY", "Errors found in WPR (write protected region)", None,
     None, ALL, None),
    (169, "SEC2_HALT_ERROR", "Internal micro-controller halt", None, None, HOPPER_ON, None),
    (170, "NVLINK_SECURE_OTHER", "Interrupt seen in CC mode", None, None, BLACKWELL, None),
    (171, "UNCORRECTABLE_DRAM_ERROR", "Details of an Xid 48 (DRAM)", None, None, ALL, None),
    (172, "UNCORRECTABLE_SRAM_ERROR", "Details of an Xid 48 (SRAM)", None, None, ALL, None),
)
# fmt: on

CATALOG: dict[int, XidInfo] = {
    **{
        x: XidInfo(x, m, "Unused (deprecated, or Volta and older)", _CS, "N/A; Unused", ())
        for x, m in _UNUSED
    },
    **{row[0]: XidInfo(*row) for row in _ROWS},
}
NVLINK5 = frozenset(range(144, 151))  # severity in the message (the "XID 144-150 Decode" sheet)
XID_RECOVERY_ACTION = 154
# Xid 154's new action: the number NVML's nvmlGpuRecoveryAction_t gives it, printed as
# "to 0x2 (Node Reboot Required)"; the catalogue's Xid 154 row lists the names.
RECOVERY_ACTIONS: dict[int, str] = {
    0: "NONE",
    1: "RESET_GPU",
    2: "RESTART_BM",
    3: "DRAIN_P2P",
    4: "DRAIN_AND_RESET",
}


def lookup(xid: int) -> XidInfo:
    """The catalogue's row, or for an Xid it does not list a row that says so (no guessed name,
    no action)."""
    row = CATALOG.get(xid)
    if row is not None:
        return row
    return XidInfo(
        xid,
        "",
        f"not in NVIDIA's Xid Catalog as of {CATALOG_VERSION}",
        None,
        None,
        (),
        None,
        known=False,
    )
