"""XID and SXID numbers are bounded where the kernel log is matched: a number longer than the
10 digits a 32-bit XID has is seen and rejected (ValueError, which the agent counts as a
skipped record), never silently unmatched and never handed whole to int()."""

from __future__ import annotations

import pytest

from mcpnode.agent.health import parse_records
from mcpnode.audit.xid import LogRecord, parse_kmsg_record, parse_sxid, parse_xid

XID = "NVRM: Xid (PCI:0000:3a:00): {}, pid=1, name=x, detail"
SXID = "nvidia-nvswitch2: SXid (PCI:0000:07:00.0): {}, Fatal, detail"


def _record(message: str) -> LogRecord:
    return LogRecord(message, 1, 2)


@pytest.mark.parametrize("digits", ["79", "4294967295", "4294967296", "0000000079"])
def test_xids_of_up_to_ten_digits_parse(digits: str) -> None:
    xid = parse_xid(_record(XID.format(digits)))
    assert xid is not None and xid.xid == int(digits)
    sxid = parse_sxid(_record(SXID.format(digits)))
    assert sxid is not None and sxid.sxid == int(digits)


@pytest.mark.parametrize("digits", ["42949672960", "7" * 11, "7" * 5000, "1" * 200_000])
def test_longer_numbers_are_rejected_not_missed(digits: str) -> None:
    with pytest.raises(ValueError, match="longer than 10 digits"):
        parse_xid(_record(XID.format(digits)))
    with pytest.raises(ValueError, match="longer than 10 digits"):
        parse_sxid(_record(SXID.format(digits)))


def test_the_agent_counts_each_rejected_record_once() -> None:
    records = [
        f"4,{seq},{seq * 10},-;" + message
        for seq, message in enumerate(
            (XID.format(79), XID.format("9" * 11), SXID.format("9" * 40), XID.format(2**32)),
            start=1,
        )
    ]
    xids, sxids, skipped = parse_records(records)
    assert [x.xid for x in xids] == [79]
    assert sxids == [] and skipped == 3


def test_a_kmsg_head_past_64_bits_is_not_a_record() -> None:
    assert parse_kmsg_record("4," + "1" * 21 + ",5,-;" + XID.format(79)) is None
    record = parse_kmsg_record("4," + "1" * 20 + ",5,-;" + XID.format(79))
    assert record is not None and record.seq == int("1" * 20)
