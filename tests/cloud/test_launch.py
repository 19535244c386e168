"""`mens cloud launch`: sky.yaml for the chosen offer, parsed by SkyPilot itself (offline), and a
spec that re-plans to the same pinned shape on the remote tier; with hw.nodes>1, SkyPilot's
num_nodes and a torchrun run line (golden file tests/launch/golden/sky_run_2_nodes.sh)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cloud_util import read_json

from mens.plan.memory import GiB

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "launch" / "golden"
SKY_PY = ROOT / ".venv-sky" / "bin" / "python"   # `make install` builds it (SkyPilot's own pins)
PARSE = """import json, sys, sky
task = sky.Task.from_yaml(sys.argv[1])
(res,) = task.resources
print(json.dumps({"accelerators": res.accelerators, "use_spot": res.use_spot,
                  "cloud": str(res.cloud), "file_mounts": sorted(task.file_mounts or {}),
                  "num_nodes": task.num_nodes, "run": task.run}))"""


def sky_parse(path: Path) -> dict:
    """SkyPilot's own Task.from_yaml (offline), in SkyPilot's venv or this one if it has sky."""
    try:
        import sky  # noqa: F401
        py = sys.executable
    except ImportError:
        if not SKY_PY.exists():
            pytest.skip("SkyPilot is not installed: `make install` builds .venv-sky with it "
                        "(its pins conflict with mens's dev dependencies)")
        py = str(SKY_PY)
    p = subprocess.run([py, "-c", PARSE, str(path)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def _replan(run_dir):
    from mens.plan.spec import compile_run, load_rerun
    return compile_run(load_rerun(str(run_dir)), "plan")


@pytest.mark.parametrize("args, offer", [
    (["+rung=8b", "lane=full"], None),                                   # cheapest that fits
    (["+rung=8b", "lane=qlora", "cloud.offer=gcp:H100:1", "cloud.spot=true"], "gcp:H100:1"),
    (["+rung=4b", "lane=lora", "cloud.offer=lambda:A100:4"], "lambda:A100:4"),
])
def test_every_sky_yaml_parses_and_pins_the_planned_shape(cloud_cli, tmp_path, args, offer):
    from mens.cloud.catalog import SHIPPED, find, load
    from mens.cloud.estimate import estimate
    from mens.config.compose import compose

    run = tmp_path / "r"
    p = cloud_cli("mens.cloud", "launch", *args, f"hydra.run.dir={run}")
    assert p.returncode == 0, p.stderr
    assert "not launched" in p.stdout and "launch -c mens-" in p.stdout   # no credentials here
    task = sky_parse(run / "sky.yaml")                                     # SkyPilot's own parser
    raw = yaml.safe_load((run / "sky.yaml").read_text())
    if offer is None:   # the cheapest offer that fits, as `mens cloud estimate` ranks them
        offer = next(o for o in estimate(compose(args))["offers"] if o["fits"])["id"]
    o = find(load(SHIPPED), offer)
    assert task["accelerators"] == {o.gpu: o.count}
    assert task["use_spot"] == ("cloud.spot=true" in args)
    assert task["cloud"].lower().startswith(o.provider[:3])
    assert raw["resources"]["infra"].split("/")[0] == o.provider
    assert "python -m mens rerun=" in raw["run"] and "pip install" in raw["setup"]
    assert "~/mens/run" in task["file_mounts"]
    # spec.yaml in the run dir carries the offer's tier, GPU count and the planned shape: the
    # remote `rerun=` re-plans exactly it
    planned = read_json(run / "plan.json")
    spec, plan = _replan(run)
    assert spec.hw.name == o.tier and spec.hw.devices == o.count
    assert (plan.shape.micro_batch, plan.grad_accum, plan.shape.checkpointing) == \
        (planned["shape"]["micro_batch"], planned["grad_accum"], planned["shape"]["checkpointing"])
    assert plan.fits and plan.peak_bytes == planned["peak_bytes"]


def test_spot_without_a_spot_price_exits_2(cloud_cli, tmp_path):
    p = cloud_cli("mens.cloud", "launch", "cloud.offer=lambda:H100:1", "cloud.spot=true",
                  f"hydra.run.dir={tmp_path}/r")
    assert p.returncode == 2 and "cloud.spot" in p.stderr


def test_an_offer_that_does_not_fit_is_refused_with_exit_3(cloud_cli, tmp_path):
    p = cloud_cli("mens.cloud", "launch", "+rung=32b", "lane=full", "cloud.offer=vast:RTX4090:1",
                  f"hydra.run.dir={tmp_path}/r")
    assert p.returncode == 3 and "refuses" in p.stderr
    assert not (tmp_path / "r" / "sky.yaml").exists()


def test_two_nodes_ask_skypilot_for_num_nodes_and_run_torchrun_over_its_variables(cloud_cli,
                                                                               tmp_path):
    import os
    import shlex

    from torch.distributed.run import get_args_parser

    run = tmp_path / "r"
    p = cloud_cli("mens.cloud", "launch", "+rung=8b", "lane=full", "cloud.offer=lambda:H100:8",
                  "hw.nodes=2", "launch.max_restarts=1", f"hydra.run.dir={run}")
    assert p.returncode == 0, p.stderr
    task = sky_parse(run / "sky.yaml")                                     # SkyPilot's own parser
    assert task["num_nodes"] == 2 and task["accelerators"] == {"H100": 8}  # 8 GPUs on each node
    golden = GOLDEN / "sky_run_2_nodes.sh"
    if os.environ.get("MENS_UPDATE_GOLDEN") == "1":
        golden.write_text(task["run"] + "\n")
    assert task["run"] + "\n" == golden.read_text()
    # torchrun's own parser reads the line as the remote shell expands it on node 1 of 2: the
    # script up to torchrun, then torchrun's argv printed one argument a line
    env = {"SKYPILOT_NODE_IPS": "10.0.0.1\n10.0.0.2", "SKYPILOT_NUM_NODES": "2",
           "SKYPILOT_NUM_GPUS_PER_NODE": "8", "SKYPILOT_NODE_RANK": "1", "HOME": "/home/sky",
           "PATH": os.environ["PATH"]}
    *head, line = task["run"].splitlines()
    assert shlex.split(line)[0] == "torchrun"
    script = "\n".join([*head, "printf '%s\\n' " + line])
    argv = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                          check=True).stdout.splitlines()
    a = get_args_parser().parse_args(argv[1:])
    assert (a.nnodes, a.nproc_per_node, a.node_rank, a.rdzv_endpoint, a.max_restarts) == \
        ("2", "8", 1, "10.0.0.1:29500", 1)
    assert a.module and a.training_script == "mens"
    assert a.training_script_args == ["rerun=/home/sky/mens/run",
                                      "hydra.run.dir=/home/sky/mens/outputs/r"]
    spec, plan = _replan(run)          # the spec the remote re-plans: two nodes of 8
    assert (spec.hw.nodes, spec.hw.devices) == (2, 8)
