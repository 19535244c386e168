"""`mens launch ray` (issue #41's executor): a real local Ray cluster on this machine's 2 CPUs,
two Ray Train workers each running `python -m mens` (gloo on loopback), the tiny rung.

The same 2-row optimizer steps as one process with micro-batch 1 × accumulation 2 must give the
same losses to 1e-6 and the same adapter (as two torchrun "nodes" do). With
launch.max_restarts=1, SIGKILL to rank 1's `python -m mens` after step 3's checkpoint: Ray's
FailureConfig restarts the group, it resumes from last.ckpt, and ends on the uninterrupted
adapter. A cluster that cannot hold the run exits 2 before any worker starts, naming what it has
and what the run asks; one that holds it but not now gives up after launch.ray_wait_s. Fast:
config errors exit 2 before Ray starts, `--help` imports no Ray, what the driver hands the
workers of its environment, and the check of a cluster's nodes against a run's.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launched_util import (COMMON, ONE, STEPS, TIMEOUT, adapter_gap, assert_same_losses,
                            clean_env)
from mens.run.telemetry import read

# Ray places both workers on its one local node: one node of two ranks (LOCAL_WORLD_SIZE=2)
TWO_WORKERS = ["train.grad_accum=1", "hw.nodes=1", "hw.devices=2", "hw.strategy=ddp"]


def ray_env() -> dict:
    """The launched tests' clean environment, with the local Ray on loopback too: on Linux Ray
    binds and dials the machine's own address unless RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (its
    single-machine mode), and tests send nothing there."""
    return clean_env(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")


def launch_ray(cwd: Path, *args: str) -> subprocess.Popen:
    out, err = (open(cwd / f"driver.{s}", "w") for s in ("out", "err"))
    return subprocess.Popen([sys.executable, "-m", "mens.launch", "ray", *args,
                             f"hydra.run.dir={cwd / 'run'}"], cwd=cwd, env=ray_env(),
                            stdout=out, stderr=err, start_new_session=True)


def finish(p: subprocess.Popen, cwd: Path) -> str:
    """Wait for the driver; its stdout. On the way out nothing it started is left running."""
    import psutil

    try:
        rc = p.wait(TIMEOUT)
        log = "".join((cwd / f"driver.{s}").read_text() for s in ("out", "err"))
        assert rc == 0, f"mens launch ray exit {rc}:\n{log[-6000:]}"
        return (cwd / "driver.out").read_text()
    finally:
        if p.poll() is None:
            for child in psutil.Process(p.pid).children(recursive=True):
                child.kill()
            p.kill()
            p.wait()


def assert_same_run(run: Path, reference: Path) -> None:
    assert_same_losses(run, reference)
    assert adapter_gap(run, reference) <= 1e-6


def assert_one_run_dir(tmp: Path, run: Path) -> None:
    """Rank 0 alone wrote, into the launch's run dir: nothing beside it but the driver's logs."""
    assert sorted(p.name for p in tmp.iterdir()) == ["driver.err", "driver.out", "run"]
    assert list(tmp.rglob("telemetry.jsonl")) == [run / "telemetry.jsonl"]
    assert len(list(tmp.rglob("adapter_config.json"))) == 1


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """One process, micro-batch 1 × accumulation 2: the same rows per step as two ranks."""
    tmp = tmp_path_factory.mktemp("one")
    res = subprocess.run([sys.executable, "-m", "mens", *COMMON, *ONE,
                          f"hydra.run.dir={tmp / 'run'}"], cwd=tmp, env=ray_env(),
                         capture_output=True, text=True, timeout=TIMEOUT)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return tmp / "run"


@pytest.mark.slow
def test_two_ray_workers_match_one_process(reference, tmp_path):
    out = finish(launch_ray(tmp_path, *COMMON, *TWO_WORKERS), tmp_path)
    run = tmp_path / "run"
    assert_same_run(run, reference)
    assert_one_run_dir(tmp_path, run)
    rows = read(run / "telemetry.jsonl")
    start = [r for r in rows if r["event"] == "TRAIN_START"]
    assert len(start) == 1 and start[0]["world_size"] == 2
    assert start[0]["launch"] == {"launcher": "env", "id": None, "world_size": 2, "nodes": 1,
                                  "per_node": 2}   # the variables the Ray workers set
    assert not [r for r in rows if r["event"] == "RESUME"]
    assert "1 node(s) × 2 rank(s) at 127.0.0.1:" in out   # the local cluster, on loopback
    # rank 0's telemetry, read back and said by the driver
    assert "finished" in out and "(resumed 0×" in out and f"steps={STEPS} world_size=2" in out
    assert "cluster_environment=LightningEnvironment" in out


def kill_rank_1_after(driver: subprocess.Popen, run: Path, step: int) -> list[int]:
    """SIGKILL to the `python -m mens` whose RANK is 1 (a child of a Ray worker, under the
    driver's local cluster) once last.ckpt holds `step`; the steps checkpointed by then."""
    import psutil

    deadline = time.time() + TIMEOUT
    while time.time() < deadline:
        tel = run / "telemetry.jsonl"
        rows = read(tel, strict=False) if tel.exists() else []   # rank 0 may be mid-row
        done = [r["step"] for r in rows if r["event"] == "CHECKPOINT"]
        if done and max(done) >= step and (run / "checkpoints" / "last.ckpt").is_file():
            for child in psutil.Process(driver.pid).children(recursive=True):
                try:
                    if child.environ().get("RANK") == "1" and child.cmdline()[1:3] == ["-m",
                                                                                      "mens"]:
                        child.send_signal(signal.SIGKILL)
                        return done
                except psutil.Error:
                    continue
            raise AssertionError("no `python -m mens` of rank 1 to kill (finished already?)")
        assert driver.poll() is None, "mens launch ray ended before the kill"
        time.sleep(0.05)
    raise AssertionError(f"no checkpoint of step {step} within {TIMEOUT} s")


@pytest.mark.slow
def test_a_killed_worker_is_restarted_by_ray_and_resumes(reference, tmp_path):
    driver = launch_ray(tmp_path, *COMMON, *TWO_WORKERS, "launch.max_restarts=1")
    try:
        done = kill_rank_1_after(driver, tmp_path / "run", 3)
    finally:
        out = finish(driver, tmp_path)
    assert max(done) < STEPS, done   # killed mid-run
    run = tmp_path / "run"
    rows = read(run / "telemetry.jsonl")
    # one run: the restarted group found last.ckpt and resumed it, in place
    assert [r["event"] for r in rows if r["event"] in ("TRAIN_START", "RESUME")] == \
        ["TRAIN_START", "RESUME"]
    resume = next(r for r in rows if r["event"] == "RESUME")
    assert resume["world_size"] == 2 and resume["checkpoint"].endswith("last.ckpt")
    assert_same_run(run, reference)
    assert_one_run_dir(tmp_path, run)
    assert "(resumed 1×" in out and f"steps={STEPS}" in out


def launch_fast(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mens.launch", "ray", *args,
                           f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, env=ray_env(),
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args, key", [
    (["+hw=cpu", "launch.ray_address=not an address"], "launch.ray_address"),
    (["+hw=cpu", "launch.max_restarts=-1"], "launch.max_restarts"),
    (["hw.devices=2"], "hw=auto"),   # this machine's tier is not the cluster's nodes'
])
def test_config_errors_exit_2_before_ray_starts(tmp_path, args, key):
    p = launch_fast(tmp_path, *args)
    assert p.returncode == 2, (p.stdout, p.stderr)
    (line,) = [s for s in p.stderr.splitlines() if s.startswith("mens: error (exit 2): ")]
    assert key in line and "Traceback" not in p.stderr
    assert "worker(s) on" not in p.stdout and not (tmp_path / "run" / "ray").exists()


def test_help_and_the_environment_handed_to_workers_import_no_ray():
    code = ("import sys\nfrom mens.cli.launch import main\nfrom mens.launch.ray import propagated\n"
            "try:\n    rc = main(['ray', '--help'])\nexcept SystemExit as e:\n    rc = e.code\n"
            "env = {'NCCL_IB_HCA': 'mlx5', 'NCCL_SOCKET_IFNAME': 'ib0', 'GLOO_SOCKET_IFNAME': "
            "'eth0', 'TORCH_NCCL_ASYNC_ERROR_HANDLING': '1', 'UCX_NET_DEVICES': 'mlx5_0:1', "
            "'HF_TOKEN': 'hf_x', 'WANDB_API_KEY': 'w', 'PATH': '/bin'}\n"
            "print(rc, 'ray' in sys.modules, sorted(propagated(env)))")
    p = subprocess.run([sys.executable, "-c", code], env=ray_env(), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[-1] == (
        "0 False ['GLOO_SOCKET_IFNAME', 'NCCL_IB_HCA', 'NCCL_SOCKET_IFNAME', "
        "'TORCH_NCCL_ASYNC_ERROR_HANDLING', 'UCX_NET_DEVICES']")   # no secret, nothing else


def kill_tree(p: subprocess.Popen) -> None:
    import psutil

    if p.poll() is None:
        for child in psutil.Process(p.pid).children(recursive=True):
            child.kill()
        p.kill()
        p.wait()


@pytest.mark.slow   # a local Ray starts: 18 s here
@pytest.mark.parametrize("args, asks", [
    (["+hw=h100", "hw.nodes=2", "hw.devices=8"], "2 node(s) × 8 GPU(s) each"),
    (["+hw=cpu", "hw.nodes=2", "hw.devices=1"], "2 node(s) × 1 CPU(s) each"),
])
def test_a_cluster_that_cannot_hold_the_run_exits_2_saying_what_it_has(tmp_path, args, asks):
    """Issue #49: on this GPU-less machine the local cluster was asked for 16 GPUs and waited
    for ever; two CPU "nodes" both landed on its one node and exited 2 there, after Ray spun up."""
    start = time.monotonic()
    out, err = (open(tmp_path / f"driver.{s}", "w") for s in ("out", "err"))
    p = subprocess.Popen([sys.executable, "-m", "mens.launch", "ray", *args,
                          f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, env=ray_env(),
                         stdout=out, stderr=err, start_new_session=True)
    try:
        rc = p.wait(90)
    except subprocess.TimeoutExpired:
        rc = None
    finally:
        kill_tree(p)
    took = time.monotonic() - start
    stderr = (tmp_path / "driver.err").read_text()
    assert rc == 2 and took < 60, (rc, took, stderr[-3000:])
    (line,) = [s for s in stderr.splitlines() if s.startswith("mens: error (exit 2): ")]
    assert "has 1 node (127.0.0.1: 2 CPU, 0 GPU)" in line and asks in line   # both named
    assert "Traceback" not in stderr and "throwaway local Ray" in stderr      # said, loudly
    assert "rank(s) at" not in (tmp_path / "driver.out").read_text()          # no worker started


def node(addr: str, alive: bool = True, **resources) -> dict:
    """One row of ray.nodes() (the fields check_cluster reads)."""
    return {"Alive": alive, "NodeManagerAddress": addr, "Resources": resources}


def test_a_clusters_nodes_are_checked_per_node_against_the_run():
    from mens.errors import ConfigError
    from mens.launch.ray import check_cluster, share, strategy

    gpu = {"nodes": 2, "per_node": 8, "gpu": True, "hw": "h100"}
    assert share(gpu) == {"GPU": 8} and strategy(gpu) == "STRICT_SPREAD"
    assert strategy({**gpu, "nodes": 1}) == "PACK"
    check_cluster([node("a", CPU=64, GPU=8), node("b", CPU=64, GPU=8)], gpu, "x")   # fits
    # 16 GPUs in all, but no node holds 8: a per-node check, not a total
    with pytest.raises(ConfigError) as e:
        check_cluster([node(c, CPU=32, GPU=4) for c in "abcd"], gpu, "at head:6379")
    assert e.value.key == "hw.devices" and "ask for what it holds (hw.nodes=2 hw.devices=4)" \
        in e.value.message and "at head:6379 has 4 nodes" in e.value.message
    # a dead node holds nothing; one node cannot be two
    cpu = {"nodes": 2, "per_node": 1, "gpu": False, "hw": "cpu"}
    with pytest.raises(ConfigError) as e:
        check_cluster([node("a", CPU=2), node("b", alive=False, CPU=2)], cpu, "x")
    assert e.value.key == "hw.nodes" and "has 1 node (a: 2 CPU, 0 GPU)" in e.value.message
    check_cluster([node("a", CPU=2), node("b", CPU=1)], cpu, "x")


@pytest.mark.slow   # a local Ray starts in a child: 15 s here
def test_a_cluster_that_holds_the_run_but_not_now_gives_up_after_the_wait(tmp_path):
    """Its one CPU held by another placement group: reserve() gives up after
    launch.ray_wait_s (1 s), exit 4 saying what was free, and leaves no group of its own."""
    code = (
        "import ray, time\n"
        "from ray.util.placement_group import placement_group, placement_group_table\n"
        "from mens.errors import RunFailed\n"
        "from mens.launch.ray import reserve\n"
        "ray.init(address='local', num_cpus=1, include_dashboard=False)\n"
        "held = placement_group([{'CPU': 1}])\n"
        "assert held.wait(60)\n"
        "start = time.monotonic()\n"
        "try:\n"
        "    reserve({'nodes': 1, 'per_node': 1, 'gpu': False, 'wait_s': 1.0})\n"
        "except RunFailed as e:\n"
        "    took = time.monotonic() - start\n"
        "    states = sorted(t['state'] for t in placement_group_table().values())\n"
        "    print(e.code, round(took), states)\n"
        "    print(e.message)\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=ray_env(),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    summary, message = p.stdout.splitlines()[-2:]
    assert summary == "4 1 ['CREATED', 'REMOVED']", summary   # its own group given back
    assert "launch.ray_wait_s=1 s" in message and "free: 0 CPU, 0 GPU" in message
