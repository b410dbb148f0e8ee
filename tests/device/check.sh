#!/usr/bin/env bash
# mcpnode against nvidia-smi on a real GPU host (run by ../shared/device/on-device.sh, or by
# hand from anywhere; no sudo needed):
#   1. `nvidia-smi topo -m` vs `mcpnode topo`: every differing cell, GPUs matched by index and
#      NICs by legend name, then CPU Affinity / NUMA Affinity / GPU NUMA ID per GPU (nvidia-smi
#      clips CPU Affinity to the caller's cpuset; mcpnode does not, and that is only a note);
#   2. `nvidia-smi -q -x` + `nvidia-smi nvlink -s` vs `mcpnode gpus --format json`, per GPU by
#      bus id: name, UUID, persistence, ECC, MIG, remapped rows, PCIe gen/width, active NVLinks;
#   3. the same XML vs mcpnode's health facts: clocks event reasons, temperature, power limits,
#      max/applications clocks, PCIe replays;
#   4. `nvidia-smi topo -p2p r` vs the NVML matrix of `mcpnode topo --p2p`;
#   5. `mcpnode snapshot` of this host replayed: the topology its capture computed (every new
#      NVML answer, the kernel log, AER, IB and config-space files recorded), and the health
#      findings (XIDs, AER, IB ports, ACS) of the live audit equal the replay's;
#   6. on the live host, when the probe's bindings are installed: `mcpnode probe` live, then the
#      same run replayed from a snapshot of this host (`--root`), the two reports equal but for
#      `source`; the figures are printed. With $OUT set, `mcpnode snapshot --probe` also leaves
#      $OUT/probe-snapshot.tar.gz, the capture to commit as a fixture.
# The comparisons are tests/device/compare.py and tests/device/probe_compare.py (unit-tested in
# tests/topology/test_device_compare.py and tests/probe/test_probe_device.py).
#
# Exit: 0 everything matches, 1 something differs, 2 a tool is missing or failed.
# Environment: PYTHON (default python3); MCPNODE_ROOT (default /) points mcpnode at a snapshot or
# fixture instead of this host: only for testing this script with a stand-in nvidia-smi.
set -u

PY=${PYTHON:-python3}
# Builtins only until the tools are known to be there (the test runs this with an empty PATH).
missing=0
for tool in nvidia-smi "$PY"; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "check.sh: $tool not found on PATH" >&2
    missing=1
  fi
done
[ "$missing" = 0 ] || exit 2

case ${BASH_SOURCE[0]} in */*) here=${BASH_SOURCE[0]%/*} ;; *) here=. ;; esac
repo=$(cd "$here/../.." && pwd) || exit 2
cd "$repo" || exit 2
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
root=${MCPNODE_ROOT:-/}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/mcpnode-check.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT

# capture FILE CMD...: stdout to $tmp/FILE; on failure say which command and show its stderr.
capture() {
  local file=$1 rc
  shift
  "$@" >"$tmp/$file" 2>"$tmp/stderr"
  rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "check.sh: \`$*\` exited $rc:" >&2
    cat "$tmp/stderr" >&2
    return 1
  fi
}

capture nvsmi-topo.txt nvidia-smi topo -m || exit 2
capture mcpnode-topo.txt "$PY" -m mcpnode topo --root "$root" || exit 2
capture nvsmi-q.xml nvidia-smi -q -x || exit 2
capture mcpnode-gpus.json "$PY" -m mcpnode gpus --root "$root" --format json || exit 2
nvlink=(--nvlink "$tmp/nvsmi-nvlink.txt")
if ! capture nvsmi-nvlink.txt nvidia-smi nvlink -s; then
  echo "check.sh: NVLink counts not compared" >&2
  nvlink=()
fi

echo "== topology: nvidia-smi topo -m vs mcpnode topo --root $root"
"$PY" -m tests.device.compare topo "$tmp/nvsmi-topo.txt" "$tmp/mcpnode-topo.txt"
rc_topo=$?
echo "== GPUs: nvidia-smi -q -x, nvidia-smi nvlink -s vs mcpnode gpus --root $root --format json"
"$PY" -m tests.device.compare gpus "$tmp/nvsmi-q.xml" "$tmp/mcpnode-gpus.json" \
  ${nvlink[@]+"${nvlink[@]}"}
rc_gpus=$?
echo "== GPU health: nvidia-smi -q -x vs mcpnode gpus --root $root --format json"
"$PY" -m tests.device.compare health "$tmp/nvsmi-q.xml" "$tmp/mcpnode-gpus.json"
rc_health=$?
rc_p2p=0
if capture nvsmi-p2p.txt nvidia-smi topo -p2p r; then
  capture mcpnode-p2p.txt "$PY" -m mcpnode topo --p2p --root "$root" || exit 2
  echo "== P2P: nvidia-smi topo -p2p r vs mcpnode topo --p2p --root $root"
  "$PY" -m tests.device.compare p2p "$tmp/nvsmi-p2p.txt" "$tmp/mcpnode-p2p.txt"
  rc_p2p=$?
else
  echo "check.sh: P2P matrix not compared" >&2
fi
echo "== replay: mcpnode snapshot of $root, replayed"
capture snapshot.txt "$PY" -m mcpnode snapshot --root "$root" -o "$tmp/snap.tar.gz" || exit 2
"$PY" -m tests.device.compare replay "$tmp/snap.tar.gz"
rc_replay=$?
health=(--only gpu.xid --only gpu.sxid --only pcie --only ib --only p2p --format json)
# exit 1 is the audit's verdict (something FAILed), not a failure to run
"$PY" -m mcpnode audit --root "$root" "${health[@]}" >"$tmp/audit-live.json" 2>"$tmp/stderr"
[ $? -le 1 ] || { cat "$tmp/stderr" >&2; exit 2; }
"$PY" -m mcpnode audit --root "$tmp/snap.tar.gz" "${health[@]}" >"$tmp/audit-replay.json" \
  2>"$tmp/stderr"
[ $? -le 1 ] || { cat "$tmp/stderr" >&2; exit 2; }
"$PY" -m tests.device.compare audits "$tmp/audit-live.json" "$tmp/audit-replay.json"
rc_audits=$?

# The probe: exit 1 from it is its findings, not a failure of this check; 2 is.
rc_probe=0
if [ "$root" != / ]; then
  echo "== probe: not run (MCPNODE_ROOT is not the live host)"
elif ! "$PY" -c "import cuda.bindings.driver" 2>/dev/null && ! "$PY" -c "from cuda import cuda" 2>/dev/null; then
  echo "== probe: not run (no cuda-bindings here: pip install 'mcpnode[probe]')"
else
  echo "== probe: mcpnode probe live vs replayed from a snapshot of this host"
  "$PY" -m mcpnode probe --no-save --format json >"$tmp/probe-live.json" 2>"$tmp/stderr"
  rc=$?
  if [ "$rc" -ge 2 ]; then
    echo "check.sh: \`mcpnode probe\` exited $rc:"
    cat "$tmp/stderr"
    rc_probe=2
  else
    ok=1
    capture probe-snapshot.txt "$PY" -m mcpnode snapshot -o "$tmp/probe-base.tar.gz" || ok=0
    if [ "$ok" = 1 ]; then
      capture probe-root.txt "$PY" -m tests.device.probe_compare root "$tmp/probe-live.json" \
        "$tmp/probe-base.tar.gz" "$tmp/probe-root" || ok=0
    fi
    if [ "$ok" = 1 ]; then
      "$PY" -m mcpnode probe --root "$(cat "$tmp/probe-root.txt")" --format json \
        >"$tmp/probe-replay.json" 2>"$tmp/stderr"
      rc=$?
      if [ "$rc" -ge 2 ]; then
        echo "check.sh: the replayed \`mcpnode probe --root\` exited $rc:"
        cat "$tmp/stderr"
        ok=0
      fi
    fi
    if [ "$ok" = 1 ]; then
      "$PY" -m tests.device.probe_compare compare "$tmp/probe-live.json" "$tmp/probe-replay.json"
      rc_probe=$?
    else
      rc_probe=2
    fi
  fi
  if [ -n "${OUT:-}" ] && [ "$rc_probe" -lt 2 ]; then
    "$PY" -m mcpnode snapshot --probe -o "$OUT/probe-snapshot.tar.gz" || rc_probe=2
  fi
fi

rcs="$rc_topo $rc_gpus $rc_health $rc_p2p $rc_replay $rc_audits $rc_probe"
for rc in $rcs; do
  if [ "$rc" -ge 2 ]; then
    echo "check.sh: an output could not be parsed, or the probe could not run"
    exit 2
  fi
done
if [ "$rc_probe" -ne 0 ]; then
  echo "check.sh: the probe's replay differs from the live run (DIFF lines above)"
fi
for rc in $rcs; do
  if [ "$rc" -ne 0 ]; then
    echo "check.sh: mcpnode and nvidia-smi differ (DIFF lines above)"
    exit 1
  fi
done
echo "check.sh: mcpnode and nvidia-smi agree"
exit 0
