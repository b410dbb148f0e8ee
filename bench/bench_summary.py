"""The closing table of `make bench`: per dump, every ratio measured on it, in one table; then
every target with its figure and met/MISSED, gathered from what each benchmark returned
(bench/run.py's results). A benchmark that was skipped (no lstopo, no ../shared/hosts) leaves
its rows out; nothing here measures anything.
"""

from __future__ import annotations

from typing import Any


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _per_dump(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per dump: whole-process ratio to lstopo and the Python floors', discovery in
    process, and the tarball ratios where that dump was timed as a tarball."""
    rows: dict[str, dict[str, Any]] = {}
    for r in results.get("whole_process") or []:
        row = rows.setdefault(r["dump"], {"dump": r["dump"]})
        row["lstopo_ms"] = r["lstopo_s"] * 1000
        row["mcpnode_ms"] = r["mcpnode_s"] * 1000
        row["ratio"] = r["ratio"]
        for label, v in (r.get("floor_ratio") or {}).items():
            row["floor: " + label.removeprefix("python -c ").strip("'")] = v
    for r in results.get("in_process") or []:
        rows.setdefault(r["dump"], {"dump": r["dump"]})["discover_ms"] = r["seconds"] * 1000
    tarball = results.get("tarball") or {}
    for r in tarball.get("dumps") or []:
        row = rows.setdefault(r["dump"], {"dump": r["dump"]})
        if "floor_ratio" in r:
            row[r["archive"]] = r["floor_ratio"]
    return list(rows.values())


def _targets(results: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(what, figure against its target, met) for every target a benchmark measured."""
    out: list[tuple[str, str, bool]] = []
    for r in results.get("whole_process") or []:
        v = r["ratio"]
        out.append((f"topo --format json / lstopo, {r['dump']}", f"{v:.2f}x <= 2.5x", v <= 2.5))
    floor = results.get("floor") or {}
    if _num(floor.get("help_vs_python_ratio")) is not None:
        v = floor["help_vs_python_ratio"]
        out.append(("mcpnode --help / python -c pass", f"{v:.2f}x <= 3x", v <= 3))
    for r in results.get("scale") or []:
        if r.get("kind") != "summary":
            continue
        secs = (r.get("in_process_4096_s") or {}).get("mcpnode")
        if secs is not None:
            out.append(("4,096 VFs, discover in process", f"{secs:.3f} s < 0.5 s", secs < 0.5))
        slope = (r.get("slope_ratio_vs_lstopo") or {}).get("mcpnode")
        if slope is not None:
            out.append(("cost per PCI function / lstopo's", f"{slope:.2f}x <= 2x", slope <= 2))
        rss = (r.get("peak_rss_ratio_vs_lstopo") or {}).get("mcpnode")
        if rss is not None:
            out.append(("peak RSS at 8,192 VFs / lstopo's", f"{rss:.2f}x <= 2x", rss <= 2))
    for r in (results.get("tarball") or {}).get("dumps") or []:
        if "floor_ratio" in r:
            v, t = r["floor_ratio"], r["target_ratio"]
            out.append(
                (
                    f"{r['archive']} root / (decompress + directory), {r['dump']}",
                    f"{v:.2f}x <= {t}x",
                    v <= t,
                )
            )
    for r in results.get("nvml_replay") or []:
        v = r["added_ms_per_gpu"]
        out.append((f"NVML replay per GPU, {r['host']}", f"{v:.2f} ms < 5 ms", v < 5))
    tuning = results.get("tuning") or {}
    if _num(tuning.get("plan_plus_verify_s")) is not None:
        v = tuning["plan_plus_verify_s"] * 1000
        out.append(("tuning plan + verify, 60 keys", f"{v:.2f} ms < 10 ms", v < 10))
    shipped = results.get("tuning_shipped") or {}
    if _num(shipped.get("plan_plus_verify_s")) is not None:
        v = shipped["plan_plus_verify_s"] * 1000
        floor = 2 * (_num(shipped.get("floor_bare_pass_s")) or 0.0) * 1000
        what = "tuning plan + verify, largest profile, HGX"
        out.append((what, f"{v:.2f} ms < 10 ms (2 bare passes: {floor:.2f} ms)", v < 10))
    audit = results.get("audit") or {}
    live = _num(audit.get("mcpnode audit (this host)"))
    if live is not None:
        out.append(("mcpnode audit on this host", f"{live * 1000:.0f} ms < 500 ms", live < 0.5))
    manifest = results.get("manifest") or {}
    if _num(manifest.get("build_publish_s")) is not None:
        v = manifest["build_publish_s"] * 1000
        out.append(("manifest build + publish, HGX", f"{v:.1f} ms < 20 ms", v < 20))
    agent = results.get("agent") or {}
    if _num(agent.get("idle_cpu_pct")) is not None:
        v = agent["idle_cpu_pct"]
        out.append(("agent idle CPU, HGX, metrics on", f"{v:.3f} % < 0.2 %", v < 0.2))
    if _num(agent.get("rss_mb")) is not None:
        v = agent["rss_mb"]
        out.append(("agent RSS, HGX, metrics on", f"{v:.1f} MB < 35 MB", v < 35))
    for key, label, limit, unit in (
        ("drift_p99_s", "agent drift restored, p99", 2.0, "s"),
        ("udev_p99_s", "agent udev event -> republished, p99", 0.25, "s"),
    ):
        if _num(agent.get(key)) is not None:
            v = agent[key]
            out.append((label, f"{v:.3f} {unit} < {limit} {unit}", v < limit))
    if _num(agent.get("reconcile_ms")) is not None:
        v = agent["reconcile_ms"]
        out.append(("agent reconcile, 60 keys", f"{v:.2f} ms < 5 ms", v < 5))
    return out


def print_summary(results: dict[str, Any]) -> dict[str, Any]:
    """Print the per-dump table and the targets; return both for results.json."""
    rows = _per_dump(results)
    print("\n== Summary: per dump (ratios; `floor`: that Python command alone / lstopo)")
    if rows:
        cols = [k for k in rows[0] if k != "dump"]
        for row in rows[1:]:
            cols += [k for k in row if k != "dump" and k not in cols]
        print("   " + f"{'dump':34s}" + "".join(f" {c:>18s}" for c in cols))
        for row in rows:
            cells = []
            for c in cols:
                v = row.get(c)
                if v is None:
                    cells.append(f" {'-':>18s}")
                elif c.endswith("_ms"):
                    cells.append(f" {v:15.1f} ms")
                else:
                    cells.append(f" {v:17.2f}x")
            print("   " + f"{row['dump'][:34]:34s}" + "".join(cells))
    else:
        print("   no dump measured (lstopo or ../shared/hosts missing)")
    targets = _targets(results)
    met = sum(1 for _, _, ok in targets if ok)
    print(f"\n== Summary: targets ({met} of {len(targets)} met)")
    for what, figure, ok in targets:
        print(f"   {'met   ' if ok else 'MISSED'} {what:62s} {figure}")
    return {
        "per_dump": rows,
        "targets": [{"target": w, "figure": f, "met": ok} for w, f, ok in targets],
    }
