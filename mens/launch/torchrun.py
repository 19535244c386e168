"""`mens launch torchrun`: torchrun.sh in the run dir, one command line per node.

Each line is `torchrun --nnodes=N --nproc-per-node=<hw.devices> --node-rank=<i>
--rdzv-backend=c10d --rdzv-endpoint=<launch.rdzv_endpoint> --rdzv-id=<run name>
[--max-restarts=K] -m mens <the user's overrides>`: run line i on node i. torchrun sets
RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR, Lightning's TorchElasticEnvironment reads them, and with
--max-restarts a failed group restarts and resumes from the run dir's last checkpoint (the run
dir is pinned on every line, mens.launch.common). The c10d store runs on node 0's torchrun, so
every node must reach launch.rdzv_endpoint; with several nodes it must be set.
"""
from __future__ import annotations

import shlex

from mens.errors import ConfigError
from mens.launch.common import RDZV_PORT, Launch

FILE = "torchrun.sh"


def endpoint(launch: Launch) -> str:
    ep = launch.cfg.launch.rdzv_endpoint
    if ep:
        host, _, port = str(ep).rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"launch.rdzv_endpoint={ep}: expected host:port of node 0 (its c10d "
                              f"store), e.g. launch.rdzv_endpoint=node0:{RDZV_PORT}.",
                              key="launch.rdzv_endpoint")
        return str(ep)
    if launch.nodes > 1:
        raise ConfigError(
            f"launch.rdzv_endpoint is unset with hw.nodes={launch.nodes}: every node's torchrun "
            f"must reach node 0's c10d store. Set launch.rdzv_endpoint=<node 0's address>:"
            f"{RDZV_PORT}.", key="launch.rdzv_endpoint")
    return f"127.0.0.1:{RDZV_PORT}"


def torchrun_args(nnodes: str, nproc: str, node_rank: str, rdzv_endpoint: str, rdzv_id: str,
                  max_restarts: int) -> list[str]:
    """torchrun's flags (strings: sky.yaml passes $SKYPILOT_* variables through them too)."""
    args = ["torchrun", f"--nnodes={nnodes}", f"--nproc-per-node={nproc}",
            f"--node-rank={node_rank}", "--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint}",
            f"--rdzv-id={rdzv_id}"]
    if max_restarts:
        args.append(f"--max-restarts={max_restarts}")
    return args


def lines(launch: Launch) -> list[list[str]]:
    """argv of each node's command, node 0 first."""
    ep = endpoint(launch)
    return [[*torchrun_args(str(launch.nodes), str(launch.devices), str(rank), ep, launch.name,
                            int(launch.cfg.launch.max_restarts)), "-m", "mens", *launch.overrides()]
            for rank in range(launch.nodes)]


def render(launch: Launch) -> str:
    out = [f"# mens launch torchrun: {launch.nodes} node(s) × {launch.devices} process(es); run "
           f"line i on node i (c10d store on node 0 at {endpoint(launch)})."]
    for rank, argv in enumerate(lines(launch)):
        out += [f"# node {rank}", shlex.join(argv)]
    return "\n".join(out) + "\n"
