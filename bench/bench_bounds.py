"""Hostile input, measured: how long each TOML bomb takes to be refused, how long a fan-out of
40 includes per level over 6 levels takes to resolve (`mcpnode config check`, what Ansible's
`validate:` runs), and the peak RSS of `mcpnode topo` on a root whose GPU attribute is a 2 GiB
sparse file. Each against a peer in the same run: parsing a real shipped profile, `mcpnode
config check` of the shipped example config, `topo` on the same root without the bomb.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mcpnode.tuning.errors import ProfileError  # noqa: E402
from mcpnode.tuning.profile import parse_profile  # noqa: E402
from tests.support.childrss import child_peak_rss_mib  # noqa: E402
from tests.support.minihost import GPU_DIR, build  # noqa: E402
from tests.tuning.test_bounds import BOMBS, fan_out  # noqa: E402


def _median_s(fn: object, rounds: int = 5) -> float:
    assert callable(fn)
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def _refuse(text: str) -> None:
    try:
        parse_profile(text, "bomb.toml", "bomb")
    except ProfileError:
        return
    raise AssertionError("a bomb was accepted")


def _child(argv: list[str]) -> tuple[float, float]:
    """(seconds, peak RSS MiB) of `mcpnode ARGV`, through the tests' small launcher so that the
    figure is the command's own and not this process's (see `child_peak_rss_mib`); the
    launcher's start is in every figure alike, the peers' included."""
    t0 = time.perf_counter()
    _code, rss, _err = child_peak_rss_mib(argv)
    return time.perf_counter() - t0, rss


def bench_bounds() -> dict[str, object]:
    print("\n== Hostile input ==")
    shipped = (ROOT / "profiles" / "base.toml").read_text()
    peer = _median_s(lambda: parse_profile(shipped, "base.toml", "base"))
    bombs = {}
    for name, text in sorted(BOMBS.items()):
        secs = _median_s(lambda text=text: _refuse(text))
        bombs[name] = round(secs * 1000, 2)
        print(
            f"  TOML bomb {name:<18} refused in {secs * 1000:7.2f} ms "
            f"({secs / peer:5.1f}x parsing base.toml, {peer * 1000:.2f} ms)"
        )
    with tempfile.TemporaryDirectory(prefix="mcpnode-bench-bounds-") as tmp_name:
        tmp = Path(tmp_name)
        profiles = fan_out(tmp / "profiles", 40, 6)
        config = tmp / "fan.toml"
        config.write_text('[tuning]\nprofile = "top"\n')
        example = ROOT / "etc" / "mcpnode" / "mcpnode.toml"
        fan = statistics.median(
            _child(["config", "check", str(config), "--profiles-dir", str(profiles)])[0]
            for _ in range(3)
        )
        plain = statistics.median(_child(["config", "check", str(example)])[0] for _ in range(3))
        print(
            f"  config check, 40 includes x 6 levels (241 files): {fan * 1000:.0f} ms "
            f"({fan / plain:.2f}x the shipped example config, {plain * 1000:.0f} ms; "
            "target well under 1 s)"
        )
        root = build(tmp / "root")
        clean_s, clean_rss = _child(["topo", "--format", "json", "--root", str(root)])
        with (root / GPU_DIR / "numa_node").open("r+b") as f:
            f.truncate(2 << 30)
        sparse_s, sparse_rss = _child(["topo", "--format", "json", "--root", str(root)])
        print(
            f"  topo with a 2 GiB sparse attribute: peak RSS {sparse_rss:.1f} MiB "
            f"({sparse_rss / clean_rss:.2f}x the same root without it, {clean_rss:.1f} MiB); "
            f"{sparse_s * 1000:.0f} ms vs {clean_s * 1000:.0f} ms"
        )
    return {
        "toml_bombs_ms": bombs,
        "parse_base_ms": round(peer * 1000, 3),
        "fan_out_config_check_ms": round(fan * 1000, 1),
        "example_config_check_ms": round(plain * 1000, 1),
        "sparse_attribute_peak_rss_mib": round(sparse_rss, 1),
        "clean_peak_rss_mib": round(clean_rss, 1),
    }


if __name__ == "__main__":
    bench_bounds()
