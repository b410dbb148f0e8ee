"""Host.read_kmsg / Host.open_kmsg: the kernel log, live and under a root.

Under a root the log is the regular file `dev/kmsg` (one record per line, continuation lines
starting with a space), read with bounds; a FIFO or a symlink there is refused, never waited on.
Live, /dev/kmsg is read without blocking (this machine's own log, read only). A pipe stands in
for the char device where the test needs records to arrive (the drain splits lines the same
way).
"""

from __future__ import annotations

import os
import tarfile
from pathlib import Path
from unittest import mock

import pytest

from mcpnode.errors import PathNotFound, ReadError, SymlinkLoop
from mcpnode.host import Host, KmsgStream

RECORDS = (
    "6,1,0,-;Linux version 5.15.0-119-generic",
    "4,812,5123456,-;NVRM: Xid (PCI:0000:3a:00): 79, pid=1234, name=python3, GPU has "
    "fallen off the bus.",
    "3,813,5123460,-;pcieport 0000:16:00.0: AER: Uncorrected (Fatal) error received: "
    "0000:16:00.0\n SUBSYSTEM=pci\n DEVICE=+pci:0000:16:00.0",
)


def kmsg_root(tmp_path: Path, text: str) -> Path:
    (tmp_path / "dev").mkdir(parents=True)
    (tmp_path / "dev" / "kmsg").write_text(text)
    return tmp_path


def test_records_with_continuation_lines(tmp_path: Path) -> None:
    root = kmsg_root(tmp_path, "".join(r + "\n" for r in RECORDS))
    got = Host(root).read_kmsg()
    assert got.records == RECORDS
    assert (got.truncated, got.overwritten) == (False, 0)


def test_last_line_without_newline_is_a_record(tmp_path: Path) -> None:
    root = kmsg_root(tmp_path, RECORDS[0] + "\n" + RECORDS[1])
    assert Host(root).read_kmsg().records == RECORDS[:2]


def test_bounds_keep_the_newest(tmp_path: Path) -> None:
    lines = [f"6,{i},{i * 1000},-;line {i}" for i in range(1000)]
    root = kmsg_root(tmp_path, "".join(x + "\n" for x in lines))
    by_count = Host(root).read_kmsg(max_records=10)
    assert by_count.records == tuple(lines[-10:]) and by_count.truncated
    by_size = Host(root).read_kmsg(max_bytes=200)
    assert by_size.truncated
    assert by_size.records == tuple(lines[-len(by_size.records) :])
    assert 0 < sum(len(r) + 1 for r in by_size.records) <= 200


def test_absent_fifo_and_symlink(tmp_path: Path) -> None:
    with pytest.raises(PathNotFound):
        Host(tmp_path).read_kmsg()
    (tmp_path / "dev").mkdir()
    os.mkfifo(tmp_path / "dev" / "kmsg")  # no writer: a blocking read would hang here
    with pytest.raises(ReadError, match="not a regular file"):
        Host(tmp_path).read_kmsg()
    (tmp_path / "dev" / "kmsg").unlink()
    (tmp_path / "elsewhere").write_text(RECORDS[0] + "\n")
    (tmp_path / "dev" / "kmsg").symlink_to("../elsewhere")
    with pytest.raises(SymlinkLoop):
        Host(tmp_path).read_kmsg()


def test_stream_reads_only_what_arrived(tmp_path: Path) -> None:
    root = kmsg_root(tmp_path, RECORDS[0] + "\n")
    stream = Host(root).open_kmsg()
    try:
        assert stream.fileno() is None  # a regular file: the caller polls
        assert stream.read_new().records == RECORDS[:1]
        assert stream.read_new().records == ()
        with (root / "dev" / "kmsg").open("a") as fh:
            fh.write(RECORDS[1][:30])  # half a record: held back until its newline
        assert stream.read_new().records == ()
        with (root / "dev" / "kmsg").open("a") as fh:
            fh.write(RECORDS[1][30:] + "\n")
        assert stream.read_new().records == (RECORDS[1],)
        (root / "dev" / "kmsg").write_text(RECORDS[2] + "\n")  # rewritten shorter
        assert stream.read_new().records == (RECORDS[2],)
    finally:
        stream.close()
    with pytest.raises(ReadError, match="closed"):
        stream.read_new()


def test_device_drain_splits_records_and_stops_at_eagain() -> None:
    r, w = os.pipe()
    os.set_blocking(r, False)
    stream = KmsgStream(r, None, "/dev/kmsg")
    try:
        os.write(w, ("".join(x + "\n" for x in RECORDS)).encode())
        assert stream.read_new().records == RECORDS
        assert stream.read_new().records == ()  # EAGAIN: nothing new, and no wait
        os.write(w, (RECORDS[0] + "\n").encode())
        assert stream.read_new(max_records=5).records == RECORDS[:1]
    finally:
        stream.close()
        os.close(w)


def test_recorded_into_a_snapshot(tmp_path: Path) -> None:
    root = kmsg_root(tmp_path / "src", "".join(r + "\n" for r in RECORDS))
    host = Host(root)
    with host.recording() as rec:
        host.read_kmsg()
    assert rec.files["/dev/kmsg"].decode().splitlines()[0] == RECORDS[0]
    # a snapshot holding that file replays the same records
    tarball = tmp_path / "snap.tar.gz"
    (root / "proc").mkdir()  # what marks the top of a root in an archive
    with tarfile.open(tarball, "w:gz") as tf:
        tf.add(root, arcname="mcpnode-snapshot")
    assert Host(tarball).read_kmsg().records == RECORDS


def test_scan_hands_over_read_kmsgs_records_a_batch_at_a_time(tmp_path: Path) -> None:
    """scan_kmsg: the records read_kmsg reads, in batches (a record with continuation lines
    never split between two), none kept; the newest max_bytes of a file, as read_kmsg."""
    lines = [f"6,{i},{i * 1000},-;line {i}" for i in range(1000)]
    lines[500] += "\n SUBSYSTEM=pci\n DEVICE=+pci:0000:16:00.0"
    root = kmsg_root(tmp_path, "".join(x + "\n" for x in lines) + "6,1000,0,-;no newline")
    host = Host(root)
    batches: list[tuple[str, ...]] = []
    got = host.scan_kmsg(batches.append, batch_bytes=1000)
    assert len(batches) > 10 and max(len("\n".join(b)) for b in batches) < 2000
    assert sum(batches, ()) == host.read_kmsg().records
    assert got == (1001, False, 0, 0, False)
    batches.clear()
    cut = host.scan_kmsg(batches.append, max_bytes=5000, batch_bytes=1000)
    assert sum(batches, ()) == host.read_kmsg(max_bytes=5000).records and cut.truncated
    # records coming faster than the scan reads: it stops at its bound and says so
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.write(w, "".join(x + "\n" for x in lines).encode())  # 17 kB; a read(2) takes 8 kB
    with mock.patch.object(Host, "open_kmsg", return_value=KmsgStream(r, None, "/dev/kmsg")):
        stopped = host.scan_kmsg(lambda _: None, max_bytes=9000, batch_bytes=8192)
    os.close(w)
    assert stopped.unread and not stopped.truncated and 0 < stopped.records < 1000


def test_a_scan_is_recorded_into_a_snapshot_as_a_read(tmp_path: Path) -> None:
    root = kmsg_root(tmp_path, "".join(r + "\n" for r in RECORDS))
    host = Host(root)
    with host.recording() as rec:
        host.read_kmsg()
    with host.recording() as scanned:
        host.scan_kmsg(lambda _: None, batch_bytes=200)
    assert scanned.files["/dev/kmsg"] == rec.files["/dev/kmsg"]


def test_live_kmsg_reads_without_blocking() -> None:
    host = Host("/")
    if not os.path.exists("/dev/kmsg") or not os.access("/dev/kmsg", os.R_OK):
        pytest.skip("/dev/kmsg is not readable here")
    got = host.read_kmsg(max_records=100_000)
    assert got.records, "a running kernel has logged something"
    assert all(";" in r.split("\n", 1)[0] for r in got.records)
    stream = host.open_kmsg()
    try:
        assert isinstance(stream.fileno(), int)
        stream.read_new()
    finally:
        stream.close()


# -- hostile logs: a record of many lines, numbers past their type, floods read in batches ----


def test_many_continuation_lines_are_joined_once_and_cut_at_the_record_bound(
    tmp_path: Path,
) -> None:
    # 400,000 dictionary lines under one head: joined line by line, each join copied the
    # record again (quadratic); the kernel never writes a record past 8 KiB (CONSOLE_EXT_LOG_MAX)
    root = kmsg_root(tmp_path, RECORDS[0] + "\n" + " KEY=VALUE\n" * 400_000 + RECORDS[1] + "\n")
    got = Host(root).read_kmsg()
    assert [r.split("\n", 1)[0] for r in got.records] == list(RECORDS[:2])
    assert 8000 < len(got.records[0]) <= 8192
    assert got.records[1] == RECORDS[1]
    assert got.skipped == 1


@pytest.mark.parametrize(
    "head",
    [
        "6," + "9" * 5000 + ",5123456,-;",  # past int()'s own 4,300 digits
        "6,813," + "1" * 21 + ",-;",  # a u64 has 20
        "1" * 11 + ",813,5123456,-;",
    ],
    ids=["seq-5000-digits", "usec-21-digits", "priority-11-digits"],
)
def test_a_head_with_numbers_past_their_type_is_skipped_and_counted(
    tmp_path: Path, head: str
) -> None:
    bad = head + "NVRM: Xid (PCI:0000:3a:00): 79, pid=1, name=x, GPU has fallen off the bus."
    text = RECORDS[0] + "\n" + bad + "\n SUBSYSTEM=pci\n" + RECORDS[1] + "\n"
    got = Host(kmsg_root(tmp_path, text)).read_kmsg()
    assert got.records == RECORDS[:2]  # its continuation line went with it
    assert got.skipped == 1


def test_batches_resume_where_they_stopped_and_keep_continuation_lines(tmp_path: Path) -> None:
    many = [
        f"6,{i},{i * 1000},-;message {i}"
        + ("\n SUBSYSTEM=pci\n DEVICE=+pci:0000:16:00.0" * (i % 3))
        for i in range(500)
    ]
    root = kmsg_root(tmp_path, "".join(r + "\n" for r in many))
    stream = Host(root).open_kmsg()
    got: list[str] = []
    batches = 0
    try:
        while True:
            batch = stream.read_new(batch_bytes=1000)
            assert len("\n".join(batch.records)) < 1000 + 200  # one record held over at most
            got.extend(batch.records)
            batches += 1
            if not batch.more:
                break
        assert got == many and batches > 10
        with (root / "dev" / "kmsg").open("a") as fh:
            fh.write(RECORDS[2] + "\n")
        assert stream.read_new(batch_bytes=1000) == (RECORDS[2:], False, 0, 0, False)
    finally:
        stream.close()


def test_a_line_past_the_record_bound_without_its_newline_is_not_held_whole(
    tmp_path: Path,
) -> None:
    root = kmsg_root(tmp_path, RECORDS[0] + "\n" + "6,2,0,-;" + "x" * 100_000)
    stream = Host(root).open_kmsg()
    try:
        first = stream.read_new()
        assert first.records == RECORDS[:1] and first.skipped == 1
        with (root / "dev" / "kmsg").open("a") as fh:
            fh.write("y" * 10 + "\n" + RECORDS[1] + "\n")  # its end, then a record
        assert stream.read_new().records == RECORDS[1:2]
    finally:
        stream.close()


def test_device_drain_stops_at_the_batch_and_says_more() -> None:
    r, w = os.pipe()
    os.set_blocking(r, False)
    stream = KmsgStream(r, None, "/dev/kmsg")
    try:
        lines = [f"6,{i},{i},-;line {i}" for i in range(200)]
        os.write(w, "".join(x + "\n" for x in lines).encode())
        first = stream.read_new(batch_bytes=1)  # one read(2) and no more
        assert first.more and not first.truncated
        rest = stream.read_new()
        assert first.records + rest.records == tuple(lines) and not rest.more
    finally:
        stream.close()
        os.close(w)
