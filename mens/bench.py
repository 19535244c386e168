"""`make bench`: whole-process time of the plan path against `python -c "import torch"`.

Commands run interleaved (A B C, A B C, …) so that the shared 2-core box's noise hits each
alike; the figure that counts is the ratio of medians measured side by side in one run.
Goal (issue #2): plan ≤ 0.4 × import torch. A bare Hydra app is shown for reference.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BARE_HYDRA = """
import hydra
@hydra.main(config_path=None, version_base="1.3")
def main(cfg):
    pass
main()
"""


def time_command(cmd: list[str], cwd: str) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if p.returncode not in (0, 3):
        raise SystemExit(f"bench: {' '.join(cmd)} failed ({p.returncode}): {p.stderr[-500:]}")
    return elapsed


def main(runs: int = 7) -> dict:
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "bare.py").write_text(BARE_HYDRA)
        commands = {
            "mens.plan +hw=rtx4090 +rung=8b": [py, "-m", "mens.plan", "+hw=rtx4090", "+rung=8b",
                                               f"hydra.run.dir={tmp}/run"],
            "import torch": [py, "-c", "import torch"],
            "bare hydra app": [py, "bare.py", f"hydra.run.dir={tmp}/bare"],
        }
        for cmd in commands.values():          # warm the page cache once
            time_command(cmd, tmp)
        times: dict[str, list[float]] = {k: [] for k in commands}
        for _ in range(runs):
            for name, cmd in commands.items():
                times[name].append(time_command(cmd, tmp))
    med = {k: statistics.median(v) for k, v in times.items()}
    torch_s = med["import torch"]
    print(f"{'command':34} {'median s':>9} {'× import torch':>15}   ({runs} runs each, interleaved)")
    for name, m in med.items():
        print(f"{name:34} {m:9.3f} {m / torch_s:15.2f}")
    ratio = med["mens.plan +hw=rtx4090 +rung=8b"] / torch_s
    verdict = "meets" if ratio <= 0.4 else "misses"
    print(f"plan / import torch = {ratio:.2f} ({verdict} the ≤ 0.40 goal)")
    result = {"runs": runs, "median_s": med, "samples_s": times, "ratio": ratio}
    out = Path("outputs/bench")
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan_speed.json").write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 7)
