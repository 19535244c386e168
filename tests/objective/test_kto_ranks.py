"""KTO's KL baseline z₀ on several processes is TRL's: each rank's mean over its own batch, then
the mean of those over the ranks (KTOTrainer._compute_loss:
`kl = self.accelerator.gather_for_metrics(kl).mean()`). Issue #37: mens pooled every rank's
records into one mean, which differs when the ranks hold different numbers of real records
(the last batch of an epoch, padded with repeats that weigh 0: strategy.Repeat).

mens.objective.kto.ranks_kl on a real 2-process gloo group on 127.0.0.1 (torch.distributed,
mens.train.strategy.all_sum), each rank with its own records."""
from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

WORKER = r'''
import json, sys
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

CASES = json.loads(sys.argv[2])

def run(rank, port, out):
    from mens.objective.base import Step
    from mens.objective.kto import ranks_kl
    from mens.train.strategy import all_sum

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    ctx = Step(logps=None, lm_loss=None, world=2, all_sum=all_sum)
    got = []
    for case in CASES:
        policy, reference, keep = (torch.tensor(v) for v in case[rank])
        got.append(float(ranks_kl(ctx, policy, reference, keep.bool())))
    with open(f"{out}.{rank}", "w") as f:
        json.dump(got, f)
    dist.destroy_process_group()

if __name__ == "__main__":
    import mens.objective.kto, mens.train.strategy   # imported once; fork shares them
    mp.start_processes(run, args=(int(sys.argv[1]), sys.argv[3]), nprocs=2,
                       start_method="fork")
'''

# per case, per rank: (policy KL log-probs, reference KL log-probs, keep)
CASES = [
    # rank 1's last batch: two real records and two repeats (their rows carry no tokens)
    [([-10.0, -12.0, -9.0, -11.0], [-11.0, -12.5, -10.0, -11.5], [1, 1, 1, 1]),
     ([-8.0, -7.0, 0.0, 0.0], [-12.0, -9.0, -10.0, -11.5], [1, 1, 0, 0])],
    # every record real on both ranks: the two rules agree
    [([-10.0, -12.0], [-11.0, -12.5], [1, 1]), ([-8.0, -7.0], [-12.0, -9.0], [1, 1])],
    # rank 1 holds only repeats: it has no mean and is left out
    [([-10.0, -12.0], [-11.0, -12.5], [1, 1]), ([0.0, 0.0], [-12.0, -9.0], [0, 0])],
]


def rank_mean(policy, reference, keep):
    gaps = [p - r for p, r, k in zip(policy, reference, keep) if k]
    return sum(gaps) / len(gaps) if gaps else None


def trl(case):
    means = [m for m in (rank_mean(*rank) for rank in case) if m is not None]
    return sum(means) / len(means)


def pooled(case):
    gaps = [p - r for rank in case for p, r, k in zip(*rank) if k]
    return sum(gaps) / len(gaps)


def test_z0_is_the_mean_of_the_ranks_means_as_trl_takes_it(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "z0"
    p = subprocess.run([sys.executable, str(script), str(port), json.dumps(CASES), str(out)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    got = [json.loads((tmp_path / f"z0.{r}").read_text()) for r in (0, 1)]
    assert got[0] == got[1]                                     # the same z₀ on every rank
    want = [trl(c) for c in CASES]
    assert got[0] == [pytest.approx(w, abs=1e-6) for w in want], (got[0], want)
    # the first case tells the two rules apart (ranks' means 0.75 and 3 → 1.875; pooled 1.5),
    # the second does not
    assert abs(trl(CASES[0]) - pooled(CASES[0])) > 0.3
    assert trl(CASES[1]) == pooled(CASES[1])
