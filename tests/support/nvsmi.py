"""Parse `nvidia-smi topo -m` matrices (and `mcpnode topo`, which mimics them).

Handles the real TAB-separated output and copies whose TABs were expanded to spaces (issue
trackers, docs). Expanded copies cannot be split on whitespace (empty cells vanish, a 15-char
CPU list leaves a single space before the next cell), so the TAB structure is rebuilt from
columns: nvidia-smi starts every cell on a TAB stop (multiples of 8), a TAB after text ending
at column e lands on the next stop after e, and each further empty cell adds one stop.

Lines before the header (shell prompts, `srun:` chatter, `# SOURCE` comments) are skipped, as
is everything after the matrix except the `NIC Legend:` entries. ANSI escapes (recent
nvidia-smi underlines the header row) are removed first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

TAB = 8
AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")

_NIC_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
# ANSI CSI sequences (SGR underline `ESC[4m` ... `ESC[0m` and the like).
_ANSI_CSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class TopoParseError(ValueError):
    """The text is not a topology matrix this parser understands."""


@dataclass(frozen=True)
class TopoMatrix:
    """One parsed matrix.

    `columns` are the device columns (GPU0.., NIC0.. or mlx5_N), `rows` the row labels in order.
    `cells[(row, col)]` holds every non-empty device cell, the self cell normalised to `X`.
    `cpu_affinity`, `numa_affinity`, `gpu_numa_id` have an entry for every row when the header
    has that column ("" where the row leaves it empty), and are empty mappings otherwise.
    `nic_legend` maps `NIC0 -> mlx5_0` (empty for the old format that names NICs directly).
    """

    columns: tuple[str, ...]
    rows: tuple[str, ...]
    cells: Mapping[tuple[str, str], str]
    cpu_affinity: Mapping[str, str]
    numa_affinity: Mapping[str, str]
    gpu_numa_id: Mapping[str, str]
    nic_legend: Mapping[str, str]

    @property
    def gpus(self) -> tuple[str, ...]:
        return tuple(c for c in self.columns if re.fullmatch(r"GPU\d+", c))

    @property
    def nics(self) -> tuple[str, ...]:
        return tuple(c for c in self.columns if not re.fullmatch(r"GPU\d+", c))

    def device_name(self, label: str) -> str:
        """`NIC0` -> `mlx5_0` through the legend; any other label unchanged."""
        return self.nic_legend.get(label, label)


def _split_expanded(line: str) -> list[str]:
    """Rebuild the TAB-separated fields of a line whose TABs were expanded (tabsize 8).

    Trailing empty fields cannot be recovered (the caller pads rows to the header width).
    """
    # Group words into cells. A cell starts on a TAB stop (the self cell " X " one column
    # after its stop); a word off the stops continues the previous cell after a single space
    # ("CPU Affinity", "GPU NUMA ID").
    cells: list[tuple[int, int, str]] = []  # (start column, end column, text)
    for m in re.finditer(r"\S+", line):
        start, word = m.start(), m.group()
        cell_start = start - 1 if word == "X" and start % TAB == 1 else start
        if cell_start % TAB == 0:
            cells.append((cell_start, m.end(), word))
        elif cells and start - cells[-1][1] == 1:
            s0, _, text = cells[-1]
            cells[-1] = (s0, m.end(), f"{text} {word}")
        else:
            raise TopoParseError(f"{word!r} at column {start} is off the TAB stops: {line!r}")
    fields: list[str] = []
    pos = 0  # column where the next field starts
    for start, end, text in cells:
        while pos < start:  # empty fields: each is one TAB, i.e. one stop further
            fields.append("")
            pos = (pos // TAB + 1) * TAB
        if pos != start:
            raise TopoParseError(f"cell {text!r} at column {start}, expected {pos}: {line!r}")
        fields.append(text)
        pos = (end // TAB + 1) * TAB  # the TAB after text ending at `end`
    return fields


def _fields(line: str, tabbed: bool) -> list[str]:
    if tabbed:
        return line.rstrip("\n").split("\t")
    return _split_expanded(line.rstrip())


def parse_topo_matrix(text: str) -> TopoMatrix:
    """Parse `nvidia-smi topo -m` output (TAB-separated or TAB-expanded)."""
    # nvidia-smi underlines the header with ANSI escapes even when stdout is a file, not a TTY:
    # `\t\x1b[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m` (seen with driver
    # 580.159.04 on an H200 KVM guest, 2026-11-30: tests/fixtures/device/h200-kvm-1gpu/).
    lines = _ANSI_CSI.sub("", text).splitlines()
    header_at = None
    for i, line in enumerate(lines):
        if line.startswith("#"):
            continue
        stripped = line.strip()
        if line[:1] in ("\t", " ") and (stripped.startswith("GPU0") or "CPU Affinity" in line):
            header_at = i
            break
    if header_at is None:
        raise TopoParseError("no header line (a line starting with blanks then GPU0)")
    header_line = lines[header_at]
    tabbed = "\t" in header_line
    header = _fields(header_line, tabbed)
    if header[:1] != [""]:
        raise TopoParseError("the header must start with an empty corner cell")
    labels = [h.strip() for h in header[1:]]
    while labels and labels[-1] == "":
        labels.pop()
    extra = [c for c in labels if c in AFFINITY_COLUMNS]
    columns = tuple(c for c in labels if c not in AFFINITY_COLUMNS)
    if labels[: len(columns)] != list(columns):
        raise TopoParseError("affinity columns must follow the device columns")
    for c in columns:
        if not re.fullmatch(r"[A-Za-z][\w.-]*", c):
            raise TopoParseError(f"unexpected column label {c!r}")
    if len(set(columns)) != len(columns):
        raise TopoParseError("duplicate column labels")

    rows: list[str] = []
    cells: dict[tuple[str, str], str] = {}
    affinity: dict[str, dict[str, str]] = {name: {} for name in extra}
    legend: dict[str, str] = {}
    in_matrix = True
    for line in lines[header_at + 1 :]:
        if line.startswith("#"):
            continue
        if in_matrix:
            first = re.split(r"[\t ]", line, maxsplit=1)[0]
            if first in columns:
                fields = _fields(line, tabbed)
                values = fields[1:]
                n_dev = len(columns)
                dev_values, rest = values[:n_dev], values[n_dev:]
                # nvidia-smi puts two TABs before GPU NUMA ID in rows (one in the header)
                if (
                    extra[-1:] == ["GPU NUMA ID"]
                    and len(rest) == len(extra) + 1
                    and not rest[-2].strip()
                ):
                    del rest[-2]
                if len(rest) > len(extra):
                    # trailing empty fields are fine (NIC rows end in TABs); text is not
                    if any(v.strip() for v in rest[len(extra) :]):
                        raise TopoParseError(
                            f"row {first}: {len(values)} cells for {len(labels)} columns"
                        )
                    rest = rest[: len(extra)]
                if first in rows:
                    raise TopoParseError(f"row {first} appears twice")
                rows.append(first)
                for label, value in zip(columns, dev_values, strict=False):
                    if value.strip():
                        cells[first, label] = value.strip()
                for label, value in zip(extra, rest, strict=False):
                    affinity[label][first] = value.strip()
                for name in extra:
                    affinity[name].setdefault(first, "")
                continue
            if line.strip() in ("Legend:", "NIC Legend:"):
                in_matrix = False
            continue
        m = _NIC_LEGEND.match(line)
        if m:
            legend[m.group(1)] = m.group(2)
    if not rows:
        raise TopoParseError("no matrix rows")
    for row in rows:
        if row in columns and cells.get((row, row)) not in (None, "X"):
            raise TopoParseError(f"row {row}: self cell is {cells[row, row]!r}, not X")
    return TopoMatrix(
        columns=columns,
        rows=tuple(rows),
        cells=cells,
        cpu_affinity=affinity.get("CPU Affinity", {}),
        numa_affinity=affinity.get("NUMA Affinity", {}),
        gpu_numa_id=affinity.get("GPU NUMA ID", {}),
        nic_legend=legend,
    )
