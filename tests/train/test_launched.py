"""A world a launcher set (mens.train.launched), without starting one: what each launcher's
variables say, hw.nodes/hw.devices checked against them (exit 2 naming both), the run dir every
rank and restart agrees on, and whether a launch resumes or is refused. The real launchers run
in tests/train/test_torchrun.py (slow)."""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from mens.errors import ConfigError
from mens.train.launched import (Launched, attempt, check_restarts, default_run_dir, expect,
                                 hydra_args, launched, rank_output)
from test_train_cli import mens

# what torchrun's agent gives the worker of rank 1 of `--nnodes=2 --nproc-per-node=1` (read
# from a real two-node c10d run here)
TORCHRUN = {"RANK": "1", "GROUP_RANK": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
            "WORLD_SIZE": "2", "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "localhost",
            "MASTER_PORT": "38377", "TORCHELASTIC_RESTART_COUNT": "0",
            "TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_USE_AGENT_STORE": "True"}
SLURM = {"SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "2", "SLURM_NNODES": "2",
         "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
         "SLURM_NODELIST": "gpu[07-08]", "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0"}


def test_each_launcher_is_read_as_lightning_reads_it():
    w = launched(TORCHRUN)
    assert (w.launcher, w.rank, w.world_size, w.per_node, w.nodes) == ("torchrun", 1, 2, 1, 2)
    assert w.launch_id == "none@localhost:38377"   # one round's store: no --rdzv-id given
    assert launched({**TORCHRUN, "TORCHELASTIC_RUN_ID": "job7"}).launch_id == "job7"
    s = launched(SLURM)
    assert (s.launcher, s.rank, s.world_size, s.per_node, s.nodes) == ("slurm", 3, 4, 2, 2)
    assert s.launch_id == "4242.0"
    # torchrun inside a SLURM allocation: torchelastic wins, as in Lightning
    assert launched({**SLURM, **TORCHRUN}).launcher == "torchrun"
    # an interactive allocation is no launcher (Lightning: SLURM_JOB_NAME bash/interactive)
    assert launched({**SLURM, "SLURM_JOB_NAME": "interactive"}) is None
    env = launched({"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "MASTER_ADDR": "h",
                    "LOCAL_WORLD_SIZE": "2"})
    assert (env.launcher, env.rank, env.per_node, env.nodes, env.launch_id) == \
        ("env", 2, 2, 2, None)
    # mens's own rank 1 (MensLauncher sets these, never RANK): mens started it, not a launcher
    assert launched({"LOCAL_RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                     "MASTER_PORT": "5", "NODE_RANK": "0"}) is None
    assert launched({}) is None


def cfg(devices="auto", nodes=1):
    return OmegaConf.create({"hw": {"devices": devices, "nodes": nodes}})


def test_auto_devices_take_the_launchers_and_matching_ones_pass():
    c = cfg(nodes=2)
    expect(c, launched(TORCHRUN))
    assert c.hw.devices == 1
    c = cfg(devices=2, nodes=2)
    expect(c, launched(SLURM))
    assert c.hw.devices == 2


@pytest.mark.parametrize("devices,nodes,named", [
    (1, 1, ["hw.nodes=1", "on 2 nodes", "Set hw.nodes=2", "--nnodes=1"]),
    (2, 2, ["hw.devices=2", "1 per node", "Set hw.devices=1", "--nproc-per-node=2"]),
    (4, 1, ["hw.nodes=1 and hw.devices=4", "Set hw.nodes=2 hw.devices=1"]),
])
def test_a_world_other_than_the_spec_says_is_exit_2_naming_both(devices, nodes, named):
    with pytest.raises(ConfigError) as e:
        expect(cfg(devices, nodes), launched(TORCHRUN))
    assert e.value.code == 2 and e.value.key in ("hw.nodes", "hw.devices")
    assert "torchrun started 2 processes" in e.value.message
    for text in named:
        assert text in e.value.message, (text, e.value.message)


def test_slurm_mismatch_names_its_own_flags():
    with pytest.raises(ConfigError) as e:
        expect(cfg(devices=8, nodes=2), launched(SLURM))
    m = e.value.message
    assert "SLURM (srun) started 4 processes (2 per node on 2 nodes)" in m
    assert "hw.devices=8" in m and "--ntasks-per-node=8" in m


def test_every_rank_and_restart_names_the_same_run_dir():
    w = launched(TORCHRUN)
    assert default_run_dir(w, "train") == "outputs/torchrun-localhost-38377_train"
    named = launched({**TORCHRUN, "TORCHELASTIC_RUN_ID": "job/42"})
    assert default_run_dir(named, "train") == "outputs/torchrun-job_42_train"
    assert default_run_dir(launched(SLURM), "train") == "outputs/slurm-4242.0_train"
    with pytest.raises(ConfigError) as e:   # no job id: the user names the dir
        default_run_dir(launched({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0",
                                  "MASTER_ADDR": "h"}), "train")
    assert e.value.key == "hydra.run.dir"


def test_ranks_above_zero_write_no_hydra_record_and_no_log():
    rank1 = hydra_args(["lane=lora"], "train", launched(TORCHRUN))
    assert rank1 == ["lane=lora", "hydra.run.dir=outputs/torchrun-localhost-38377_train",
                     "hydra.output_subdir=null", "hydra/job_logging=none",
                     "hydra/hydra_logging=none"]
    rank0 = hydra_args(["hydra.run.dir=/shared/r"], "train",
                       launched({**TORCHRUN, "RANK": "0"}))
    assert rank0 == ["hydra.run.dir=/shared/r"]   # the user's dir, and rank 0 records it
    assert hydra_args(["resume=/shared/r"], "train", launched({**TORCHRUN, "RANK": "0"})) == \
        ["resume=/shared/r"]


def test_ranks_above_zero_print_nothing_on_stdout(capsys):
    """rank_output: what a rank prints, decided beside what it writes (hydra_args)."""
    import sys
    for world, said in [(None, "alone\n"), (launched({**TORCHRUN, "RANK": "0"}), "rank 0\n"),
                        (launched(TORCHRUN), "")]:
        with rank_output(world):
            print("alone" if world is None else f"rank {world.rank}")
            print(f"err {world and world.rank}", file=sys.stderr)
        out, err = capsys.readouterr()
        assert out == said and err.startswith("err")


def test_a_sweep_under_a_launcher_of_several_processes_is_refused():
    with pytest.raises(ConfigError) as e:
        hydra_args(["-m", "lane=lora,qlora"], "train", launched(TORCHRUN))
    assert "2 processes for one run" in e.value.message
    one = Launched("slurm", 0, 1, 1, 1, "9.0")   # an sbatch of one task may sweep
    assert hydra_args(["-m", "x=1,2"], "train", one) == ["-m", "x=1,2"]
    assert hydra_args(["x=1"], "train", one) == ["x=1"]   # and keeps Hydra's dated dir


def _run_of(tmp_path, launch_id, checkpoint=True, finished=False):
    from mens.run.rundir import RunDir
    from mens.run.telemetry import Event
    from mens.train.telemetry import Telemetry

    run = RunDir(tmp_path / "run")
    tel = Telemetry(run.telemetry)
    tel.emit(Event.TRAIN_START, spec={}, plan={}, git={}, versions={}, host={}, argv=[],
             allocator={}, world_size=2, strategy="ddp",
             launch={"launcher": "torchrun", "id": launch_id})
    tel.close()
    if checkpoint:
        run.checkpoints.mkdir()
        run.last_checkpoint.write_bytes(b"ckpt")
    if finished:
        run.write_json(run.SUMMARY, {})
    return run.path


def test_the_same_launch_resumes_from_its_checkpoint(tmp_path):
    w = launched(TORCHRUN)
    assert attempt(tmp_path / "nothing_yet", w) is False
    assert attempt(_run_of(tmp_path, w.launch_id), w) is True


def test_the_same_launch_without_a_checkpoint_starts_over(tmp_path):
    w = launched(TORCHRUN)
    assert attempt(_run_of(tmp_path, w.launch_id, checkpoint=False), w) is False


@pytest.mark.parametrize("finished", [False, True])
def test_another_launchs_run_is_refused(tmp_path, finished):
    w = launched(TORCHRUN)
    other = "none@localhost:1234" if not finished else w.launch_id
    with pytest.raises(ConfigError) as e:
        attempt(_run_of(tmp_path, other, finished=finished), w)
    m = e.value.message
    assert ("finished run" if finished else "unfinished run of another launch") in m
    assert "resume=" in m and e.value.code == 2


def test_a_launched_rank_whose_world_differs_exits_2(tmp_path):
    """`python -m mens` as torchrun's rank 0 of 2 nodes, with hw.nodes left at 1: one paragraph
    naming both, exit 2, before any process group or model."""
    env = {**TORCHRUN, "RANK": "0", "GROUP_RANK": "0"}
    res = mens("+hw=cpu", "logger=csv", "hw.devices=1", cwd=tmp_path, env=env, timeout=300)
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("mens: error")]
    assert len(errors) == 1 and "Traceback" not in res.stderr
    assert "torchrun started 2 processes (1 per node on 2 nodes)" in errors[0]
    assert "hw.nodes=1" in errors[0] and "Set hw.nodes=2" in errors[0]
    run = tmp_path / "outputs" / "torchrun-localhost-38377_train"
    assert run.is_dir() and not (run / "telemetry.jsonl").exists()


def test_elastic_restarts_ask_for_a_job_id_and_an_unshared_store():
    check_restarts(launched(TORCHRUN))   # no --max-restarts: nothing to ask
    with pytest.raises(ConfigError) as e:
        check_restarts(launched({**TORCHRUN, "TORCHELASTIC_MAX_RESTARTS": "1"}))
    assert "--rdzv-id" in e.value.message and e.value.code == 2
    named = {**TORCHRUN, "TORCHELASTIC_MAX_RESTARTS": "1", "TORCHELASTIC_RUN_ID": "job7"}
    with pytest.raises(ConfigError) as e:
        check_restarts(launched(named))
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in e.value.message
    assert "135712" in e.value.message
    check_restarts(launched({**named, "TORCHELASTIC_USE_AGENT_STORE": "False"}))
    with pytest.raises(ConfigError):   # refused before Hydra makes a run dir
        hydra_args([], "train", launched(named))
