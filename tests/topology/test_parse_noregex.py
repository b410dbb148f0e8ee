"""The discovery parsers written without `re` (codec/bounded.py, codec/cpus.py, topology/parse.py,
sysfs.py, caches.py, gpumem.py, nvmens.py, rdmaports.py) against the patterns they replace,
kept here as they were: the same texts taken and refused, the same values captured, the same
error messages. Hypothesis draws texts from the characters where a hand-written parser and a
pattern part ways (non-ASCII digits and spaces, `_`, `+`, a final newline, the separators) and
from pieces of the valid forms, so near-misses are common; the hostile cases are tabled too.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcpnode.codec import bounded, cpus
from mcpnode.topology import caches, gpumem, nvmens, parse, rdmaports, sysfs
from mcpnode.topology.model import PciAddress

# Where a parser and a pattern can disagree: ASCII and non-ASCII digits (Arabic-Indic one,
# superscript two, fullwidth zero), hex letters, the separators, ASCII and Unicode spaces
# (`\x1c` and NEL are Unicode spaces only; `\r`, `\x0b`, `\x0c` ASCII ones a line does not
# end at), `_` and `+` (int() takes `1_0` and `+1`), a sign and a backslash.
CHARS = "0123456789abcdefABCDEFxX:.-/, \t\n\r\x0b\x0c\x1c\x85\xa0١²０_+\\"

# Pieces of the valid forms, so that drawn texts come near them.
PIECES = (
    "0000",
    "1b",
    "00.0",
    ":",
    ".7",
    "pci",
    "cpu",
    "node",
    "virtio",
    "index",
    "nvme",
    "c",
    "n",
    "K",
    "M",
    "G",
    "GT/s",
    " PCIe",
    " Gb/sec",
    " (4X NDR)",
    "ACTIVE",
    ": ",
    "InfiniBand",
    "Node",
    "Status",
    "MemTotal:",
    "kB",
    "online",
    "-1",
    "\\040",
    "\\777",
    "0x",
    "0-3",
    ":2/4",
    "ffffffff",
)

_texts = st.lists(st.one_of(st.sampled_from(CHARS), st.sampled_from(PIECES)), max_size=14).map(
    "".join
)
# Overlong digit runs, for the length bounds.
_long = st.builds(
    lambda head, n, tail: head + "1" * n + tail,
    st.sampled_from(["", "cpu", "node", "index", "nvme", "-", "0x", "pci", "Node 0 MemTotal: "]),
    st.integers(0, 24),
    st.sampled_from(["", "n1", "K", ":00", " kB", "\n", " GT/s"]),
)
# Valid texts of each form, to edit: one character replaced, put in or taken out.
SEEDS = {
    "parse_decimal": ("-12", "0"),
    "parse_decimal/3": ("-12", "123"),
    "cpus._part": ("0-15:2/4", "7", "0-3"),
    "is_hex/1-8": ("ffffffff", "0"),
    "is_hex/1-": ("ffffffff0000ffff", "a"),
    "is_digits/2-3": ("12", "123"),
    "parse_hex": ("0x10de", "0X1"),
    "parse_node_meminfo_total_kib": (
        "Node 0 MemTotal: 16 kB",
        "Node 0 MemFree: 1 kB\nNode 0 MemTotal: 16 kB",
    ),
    "parse_link_speed": ("8.0 GT/s PCIe", "2.5 GT/s", "8 GT/s"),
    "parse_pci_address": ("0000:1b:00.0", "00000000:1B:00.7"),
    "is_pci_address": ("0000:1b:00.0", "00000000:1B:00.7"),
    "is_host_bridge_name": ("pci0000:00", "pci10000:00"),
    "_unescape_octal": ("/a\\040b", "\\134\\011"),
    "cpu dir": ("cpu12", "cpu0"),
    "node dir": ("node3", "node1023"),
    "virtio dir": ("virtio0", "virtio12"),
    "parse_cache_size_kib": ("5118K", "4M", "1"),
    "cache index dir": ("index3", "index10"),
    "numa_status fields": ("Node: 0\nStatus: online\n", "Node:\t-1\nStatus: offline"),
    "nvme namespace dir": ("nvme0c0n1", "nvme1n1"),
    "rdma port dir": ("100", "1"),
    "rdma state": ("4: ACTIVE", "1: DOWN"),
    "rdma rate": ("400.5 Gb/sec (4X NDR)", "100 Gb/sec"),
    "rdma link layer": ("InfiniBand", "Ethernet"),
}


def _edit(text: str, edits: list[tuple[int, int, str]]) -> str:
    for at, how, char in edits:
        i = at % (len(text) + 1)
        text = (
            text[:i] + char + text[i + 1 :]
            if how == 0
            else text[:i] + char + text[i:]
            if how == 1
            else text[:i] + text[i + 1 :]
        )
    return text


# Where parsers part ways most often, drawn more often than the rest.
SPECIAL = "\n١²\x1c\r_+ 8"
_chars = st.one_of(st.sampled_from(SPECIAL), st.sampled_from(CHARS))


def texts(name: str) -> st.SearchStrategy[str]:
    """Texts for the pair `name`: mostly edits of its valid ones (a character replaced, put in
    or taken out; something put before or after), some of any shape."""
    near = st.builds(
        lambda before, text, after: before + text + after,
        st.sampled_from(["", "", " ", "\n", "0"]),
        st.builds(
            _edit,
            st.sampled_from(SEEDS[name]),
            st.lists(st.tuples(st.integers(0, 60), st.integers(0, 2), _chars), max_size=2),
        ),
        st.sampled_from(["", "", "\n", "\n\n", " ", "²", "0", "x"]),
    )
    return st.one_of(near, near, _texts, _long)


HOSTILE = [
    "",
    " ",
    "\n",
    "0",
    "00",
    "7",
    "12",
    "007",
    "-0",
    "-1",
    "--1",
    "+1",
    "1_0",
    "1 0",
    " 1",
    "1 ",
    "1\n",
    "\n1",
    "1\n\n",
    "١",
    "²",
    "０",
    "1١",
    "9" * 21,
    "9" * 20,
    "-" + "9" * 20,
    "ff",
    "0x1F",
    "0X",
    "0x",
    "0x_1",
    "0x 1",
    "0x１",
]


def outcome(f: Callable[..., object], *args: object) -> tuple[object, ...]:
    """What `f` gave: its value, or the type and message of the ValueError it raised."""
    try:
        return ("value", f(*args))
    except ValueError as err:
        return ("refused", type(err).__name__, str(err))


def same(new: Callable[..., object], old: Callable[..., object], *args: object) -> None:
    assert outcome(new, *args) == outcome(old, *args), args


# -- the former code, as it was ------------------------------------------------------------------

_DECIMAL = re.compile(r"-?[0-9]+\Z", re.ASCII)


def old_parse_decimal(text: str, max_digits: int = 20) -> int:
    t = text.strip()
    if not _DECIMAL.match(t):
        raise bounded.BoundError(f"not an integer: {bounded._clip(text)}")
    if len(t.lstrip("-")) > max_digits:
        raise bounded.BoundError(f"integer of {len(t.lstrip('-'))} digits (at most {max_digits})")
    return int(t)


_PART = re.compile(r"([0-9]{1,7})(?:-([0-9]{1,7})(?::([0-9]{1,7})/([0-9]{1,7}))?)?\Z", re.ASCII)


def old_part(text: str) -> tuple[str | None, ...] | None:
    m = _PART.match(text)
    return None if m is None else m.groups()


def old_parse_hex(text: str) -> int:
    t = text.strip()
    if not re.fullmatch(r"0[xX][0-9a-fA-F]+", t):
        raise parse.ParseError(f"not a 0x-prefixed hex id: {parse._clip(text)!r}")
    return int(t, 16)


def old_meminfo(text: str) -> int:
    m = re.search(r"^Node\s+[0-9]+\s+MemTotal:\s+([0-9]+)\s*kB", text, re.MULTILINE | re.ASCII)
    if not m:
        raise parse.ParseError("no 'Node N MemTotal: ... kB' line in node meminfo")
    return parse.parse_int(m.group(1))


_SPEED_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*GT/s(?:\s+PCIe)?\s*$")


def old_link_speed(text: str) -> float | None:
    t = text.strip()
    if t.lower().startswith("unknown") or t == "":
        return None
    m = _SPEED_RE.match(t)
    if not m:
        raise parse.ParseError(f"not a link speed: {parse._clip(text)!r}")
    return float(m.group(1))


_BDF_RE = re.compile(r"^([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")


def old_pci_address(text: str) -> object:
    m = _BDF_RE.match(text.strip())
    if not m:
        raise parse.ParseError(f"not a PCI address: {parse._clip(text)!r}")
    domain, bus, dev, fn = m.groups()
    return PciAddress(int(domain, 16), int(bus, 16), int(dev, 16), int(fn))


def old_is_pci_address(name: str) -> bool:
    return _BDF_RE.match(name) is not None


def old_is_host_bridge_name(name: str) -> bool:
    return re.match(r"^pci[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}$", name) is not None


def old_unescape(text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def old_numbered(pattern: str) -> Callable[[str], int | None]:
    def numbered(name: str) -> int | None:
        m = re.match(pattern, name)
        return int(m.group(1)) if m else None

    return numbered


def old_is_virtio_dir(name: str) -> bool:
    return re.match(r"^virtio\d+$", name) is not None


_SIZE = re.compile(r"([0-9]{1,10})([KMG]?)", re.ASCII)


def old_cache_size(text: str) -> int:
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        raise parse.ParseError(f"not a cache size: {text.strip()[:40]!r}")
    value = int(m.group(1)) * caches._SCALE[m.group(2)]
    if value > caches._MAX_U32:
        raise parse.ParseError(f"cache size out of range: {text.strip()[:40]!r}")
    return value


def old_index_number(name: str) -> int | None:
    m = re.fullmatch(r"index([0-9]{1,2})", name, re.ASCII)
    return int(m.group(1)) if m else None


def old_fields(text: str) -> list[tuple[str, str]]:
    pattern = re.compile(r"^(Node|Status):[ \t]*(\S*)[ \t]*$", re.ASCII | re.MULTILINE)
    return [(m.group(1), m.group(2)) for m in pattern.finditer(text)]


def old_shown(name: str) -> str | None:
    m = re.fullmatch(r"(nvme[0-9]{1,5})(?:c[0-9]{1,5})?(n[0-9]{1,5})", name, re.ASCII)
    return None if m is None else m.group(1) + m.group(2)


def old_shaped(pattern: str) -> Callable[[str], str | None]:
    shape = re.compile(pattern, re.ASCII)

    def parse_value(text: str) -> str | None:
        m = shape.fullmatch(text)
        if m is None:
            return None
        return m.group(1) if m.groups() else m.group(0)

    return parse_value


# (name, new, old): each takes one text.
PAIRS: list[tuple[str, Callable[[str], object], Callable[[str], object]]] = [
    ("parse_decimal", bounded.parse_decimal, old_parse_decimal),
    (
        "parse_decimal/3",
        lambda t: bounded.parse_decimal(t, max_digits=3),
        lambda t: old_parse_decimal(t, 3),
    ),
    ("cpus._part", cpus._part, old_part),
    ("is_hex/1-8", lambda t: bounded.is_hex(t, 1, 8), lambda t: _re_bool(r"[0-9a-fA-F]{1,8}\Z", t)),
    ("is_hex/1-", bounded.is_hex, lambda t: _re_bool(r"[0-9a-fA-F]+\Z", t)),
    ("is_digits/2-3", lambda t: bounded.is_digits(t, 2, 3), lambda t: _re_bool(r"[0-9]{2,3}\Z", t)),
    ("parse_hex", parse.parse_hex, old_parse_hex),
    ("parse_node_meminfo_total_kib", parse.parse_node_meminfo_total_kib, old_meminfo),
    ("parse_link_speed", parse.parse_link_speed, old_link_speed),
    ("parse_pci_address", parse.parse_pci_address, old_pci_address),
    ("is_pci_address", parse.is_pci_address, old_is_pci_address),
    ("is_host_bridge_name", parse.is_host_bridge_name, old_is_host_bridge_name),
    ("_unescape_octal", parse._unescape_octal, old_unescape),
    ("cpu dir", lambda t: sysfs._numbered(t, "cpu", 5), old_numbered(r"^cpu([0-9]{1,5})$")),
    ("node dir", lambda t: sysfs._numbered(t, "node", 4), old_numbered(r"^node([0-9]{1,4})$")),
    ("virtio dir", sysfs._is_virtio_dir, old_is_virtio_dir),
    ("parse_cache_size_kib", caches.parse_cache_size_kib, old_cache_size),
    ("cache index dir", caches._index_number, old_index_number),
    ("numa_status fields", gpumem._fields, old_fields),
    ("nvme namespace dir", nvmens._shown, old_shown),
    ("rdma port dir", rdmaports._is_port_dir, lambda t: _re_bool(r"[1-9][0-9]{0,2}\Z", t)),
    ("rdma state", rdmaports._state, old_shaped(r"[0-9]{1,2}: ([A-Z_]{1,24})")),
    (
        "rdma rate",
        rdmaports._rate,
        old_shaped(r"[0-9]{1,5}(?:\.[0-9]{1,3})? Gb/sec(?: \([0-9A-Za-z .]{1,24}\))?"),
    ),
    ("rdma link layer", rdmaports._layer, old_shaped(r"InfiniBand|Ethernet|Unknown")),
]
NAMES = [name for name, _, _ in PAIRS]


def _re_bool(pattern: str, text: str) -> bool:
    return re.match(pattern, text, re.ASCII) is not None


def _pair(name: str) -> tuple[Callable[[str], object], Callable[[str], object]]:
    return next((new, old) for n, new, old in PAIRS if n == name)


# -- hostile texts, by hand ----------------------------------------------------------------------

# Near-misses of each form: a final newline (which `$` took and `\Z` does not), spaces around
# and inside, signs, underscores, non-ASCII digits, one digit too many or too few.
FORMS = [
    "0-3,8",
    "0-15:2/4",
    "0-15:2/",
    "1-2-3",
    "1:2/4",
    "1234567-12345678",
    "0x10de",
    "0x10de\n",
    "0x10DE ",
    "Node 0 MemTotal:       16746352 kB",
    "Node 0 MemTotal:       16746352 kB\nNode 0 MemFree: 1 kB\n",
    "xNode 0 MemTotal: 1 kB\nNode 1 MemTotal: 2 kB",
    "Node\n0\nMemTotal:\n5\nkB",
    "Node 0 MemTotal: 5kB",
    "Node 0 MemTotal:5 kB",
    "Node ١ MemTotal: 5 kB",
    "Node 0 MemTotal: ١ kB",
    "Node 0 MemTotal: 1_0 kB",
    "Node\x1c0 MemTotal: 5 kB",
    "Node 0 MemTotal: " + "9" * 30 + " kB",
    "8 GT/s",
    "8.0 GT/s PCIe",
    "2.5 GT/s\n",
    "8.GT/s",
    "8. GT/s",
    ".5 GT/s",
    "8GT/s",
    "8 GT/sPCIe",
    "8 GT/s\u2003PCIe",
    "8\xa0GT/s",
    "١ GT/s",
    "8 GT/s PCIe PCIe",
    "8 GT/s GT/s",
    "unknown",
    "Unknown speed",
    "0000:1b:00.0",
    "0000:1b:00.0\n",
    "0000:1b:00.0\n\n",
    " 0000:1b:00.0",
    "00000000:1B:00.7",
    "000000000:1b:00.0",
    "000:1b:00.0",
    "0000:1b:00.8",
    "0000:1b:0.0",
    "0000:1b:000.0",
    "0000:1b:00:0",
    "0000:1b:00.0x",
    "0000:1١:00.0",
    "0000:+1:00.0",
    "hhhh:hh:hh.0",
    "0000:1h:00.0",
    "0000:1b:00.0\xe9",
    "pcihhhh:hh",
    "pCi0000:00",
    "pci0000:0h",
    "pci0000:00",
    "pci0000:00\n",
    "pci10000:00",
    "pci000000000:00",
    "pci000:00",
    "pci0000:0",
    "PCI0000:00",
    "/mnt/a\\040b",
    "\\\\101",
    "\\0401\\7",
    "\\",
    "a\\08\\",
    "\\777\\400",
    "\\049\\8\\0a",
    "cpu0",
    "cpu0\n",
    "cpu12345",
    "cpu123456",
    "cpu",
    "cpu١",
    "cpu+1",
    "node1023",
    "node10000",
    "node0\n",
    "virtio0",
    "virtio١",
    "virtio²",
    "virtio0\n",
    "virtio",
    "5118K",
    "5118K\n",
    "5118",
    "4M",
    "1G",
    "K",
    "5118KK",
    "5118 K",
    "4294967295",
    "4294967296",
    "4194304M",
    "12345678901K",
    "index0",
    "index10",
    "index100",
    "index١",
    "Node: 0\nStatus: online\n",
    "Node:\t-1 \nStatus: online",
    "Node: 0\r\nStatus: online",
    "Node: 0 1\nStatus:",
    " Node: 0",
    "Node:0\x0b",
    "Node: \xa0",
    "nvme0n1",
    "nvme0c0n1",
    "nvme0c0n1p1",
    "nvme123456n1",
    "nvme0cn1",
    "nvme0c1c2n1",
    "nvme١n1",
    "nvmen1",
    "1",
    "999",
    "1000",
    "01",
    "4: ACTIVE",
    "4:ACTIVE",
    "123: ACTIVE",
    "4: active",
    "4: " + "A" * 24,
    "4: " + "A" * 25,
    "400 Gb/sec (4X NDR)",
    "400.5 Gb/sec",
    "400.1234 Gb/sec",
    "400 Gb/sec ()",
    "400 Gb/sec (" + "x" * 24 + ")",
    "400 Gb/sec (" + "x" * 25 + ")",
    "400 Gb/sec (4X)(NDR)",
    "400 Gb/sec (a) Gb/sec (b)",
    "400 Gb/sec (",
    "123456 Gb/sec",
    "١00 Gb/sec",
    "1.١ Gb/sec",
    "400 Gb/sec (４X)",
    "InfiniBand",
    "Ethernet\n",
    "infiniband",
]


@pytest.mark.parametrize("name", NAMES)
def test_hostile_texts_as_the_patterns_took_them(name: str) -> None:
    new, old = _pair(name)
    for text in HOSTILE + FORMS:
        same(new, old, text)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_drawn_texts_as_the_patterns_took_them(name: str, data: st.DataObject) -> None:
    new, old = _pair(name)
    same(new, old, data.draw(texts(name), label="text"))


def test_every_pair_has_seeds() -> None:
    assert sorted(SEEDS) == sorted(NAMES)


@settings(max_examples=300, deadline=None)
@given(
    text=st.lists(
        st.sampled_from(["0", "1", "7", "8", "١", "²", "\n", " ", "a", "\x1c"]), max_size=12
    ).map("".join),
    least=st.integers(1, 4),
    most=st.integers(1, 9),
)
def test_is_digits_is_the_ascii_class(text: str, least: int, most: int) -> None:
    pattern = rf"[0-9]{{{least},{most}}}" if least <= most else r"(?!)"
    assert bounded.is_digits(text, least, most) == _re_bool(pattern + r"\Z", text)
    hexes = rf"[0-9a-fA-F]{{{least},{most}}}" if least <= most else r"(?!)"
    assert bounded.is_hex(text, least, most) == _re_bool(hexes + r"\Z", text)


def test_lines_of_meminfo_and_mounts_are_read_whole() -> None:
    """The texts real files hold: several lines, the field on the last, escapes in a mount
    point (fs/proc_namespace.c mangle)."""
    meminfo = "".join(f"Node 3 {k}: {i} kB\n" for i, k in enumerate(["MemFree", "MemUsed"]))
    meminfo += "Node 3 MemTotal:       16746352 kB\nNode 3 Active: 1 kB\n"
    same(parse.parse_node_meminfo_total_kib, old_meminfo, meminfo)
    assert parse.parse_node_meminfo_total_kib(meminfo) == 16746352
    line = "36 35 98:0 / /mnt/with\\040space\\011tab rw - ext3 /dev/root rw\n"
    assert parse.parse_mountinfo(line) == [("/", "/mnt/with space\ttab", "ext3", ("rw",))]
    assert parse._unescape_octal("/a\\134040") == old_unescape("/a\\134040") == "/a\\040"
