"""The commands as a user runs them: exit codes, one-paragraph errors, files, sweeps, rerun."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml


def no_traceback(proc):
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    errors = [l for l in proc.stderr.splitlines() if l.startswith("mens: error")]
    assert len(errors) <= 1


@pytest.mark.parametrize("args, code", [
    (["+hw=h200", "+rung=0.6b", "lane=lora"], 0),
    (["+hw=cpu", "hw.memory_gb=1", "+rung=8b"], 3),
    (["+hw=rtx4090", "+rung=32b", "lane=full"], 3),
    (["+hw=rtx4080s", "+rung=4b", "train.micro_batch=8", "train.seq_len=4096"], 3),
])
def test_acceptance_commands(mens_cli, tmp_path, args, code):
    p = mens_cli("mens.plan", *args, f"hydra.run.dir={tmp_path}/run")
    assert p.returncode == code, p.stderr
    no_traceback(p)
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    assert plan["verdict"] == ("fits" if code == 0 else "refuses")
    assert "predicted peak" in p.stdout   # the cell's label as the plan has it (CPU: fitted)
    assert ("(calibrated cell" if plan["calibrated"] else "(external cell" if plan["external"]
            else "UNCALIBRATED") in p.stdout
    if code == 3:
        assert "Ways out" in p.stderr or "anyway" in p.stderr
    if args[0] == "+hw=rtx4090":
        assert "+rung=" in p.stderr and plan["ways_out"]


def test_users_mac_command_here_explains_how_to_plan_for_a_mac(mens_cli):
    p = mens_cli("mens", "+hw=m_series", "+rung=0.6b")
    assert p.returncode == 2
    no_traceback(p)
    assert "Apple" in p.stderr
    assert "python -m mens.plan +hw=m_series hw.memory_gb=128 +rung=0.6b" in p.stderr


def test_planning_for_a_mac_from_here(mens_cli, tmp_path):
    p = mens_cli("mens.plan", "+hw=m_series", "hw.memory_gb=128", "+rung=0.6b",
                 f"hydra.run.dir={tmp_path}/r")
    assert p.returncode == 0, p.stderr
    plan = json.loads((tmp_path / "r" / "plan.json").read_text())
    # 128 GiB × 0.75 Metal working set = 96, less max(15 %, 2 GiB) = 81.6 GiB
    assert abs(plan["budget_gb"] - 81.6) < 1e-6


@pytest.mark.parametrize("args, words", [
    (["lane=lorax"], ["lorax", "lane=lora"]),
    (["+train.seq_lenn=512"], ["train.seq_lenn", "train.seq_len"]),
    (["train.max_steps=abc"], ["train.max_steps"]),
    (["train.micro_batch=-2"], ["train.micro_batch"]),
    (["+rung=0.6b", "train.seq_len=50000"], ["train.seq_len", "40960"]),
    (["lane=dpo"], ["dpo", "skill_creation"]),
])
def test_config_errors_exit_2_with_one_paragraph(mens_cli, args, words):
    p = mens_cli("mens.plan", "+hw=h100", *args)
    assert p.returncode == 2, p.stdout + p.stderr
    no_traceback(p)
    (line,) = [l for l in p.stderr.splitlines() if l.startswith("mens: error")]
    for w in words:
        assert w in line


def test_full_trace_on_request(mens_cli):
    p = mens_cli("mens.plan", "lane=lorax", env={"HYDRA_FULL_ERROR": "1"})
    assert p.returncode != 0 and "Traceback" in p.stderr


def test_missing_weights_name_repo_place_and_fetch_command(mens_cli, tmp_path):
    cache = tmp_path / "hub"
    cache.mkdir()
    env = {"HF_HUB_CACHE": str(cache), "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    p = mens_cli("mens", "+hw=cpu", "+rung=0.6b", f"hydra.run.dir={tmp_path}/r", env=env)
    assert p.returncode == 2
    no_traceback(p)
    for w in ["Qwen/Qwen3-0.6B", str(cache), "hf download Qwen/Qwen3-0.6B", "rung.init=random",
              "HF_HUB_OFFLINE"]:
        assert w in p.stderr
    assert not (tmp_path / "r" / "plan.json").exists()   # refused before anything else
    # online but no network (a closed port stands in for it): the plan fits, the download
    # fails, exit 2 with the command that fetches exactly the files needed
    env = {**env, "HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"}
    p = mens_cli("mens", "+hw=cpu", "+rung=0.6b", f"hydra.run.dir={tmp_path}/n", env=env)
    assert p.returncode == 2, p.stderr
    no_traceback(p)
    assert "could not reach" in p.stderr and "hf download Qwen/Qwen3-0.6B" in p.stderr
    assert (tmp_path / "n" / "plan.json").exists() and not (tmp_path / "n" / "summary.json").exists()


def test_sweep_runs_every_job_and_exits_nonzero(mens_cli, tmp_path):
    p = mens_cli("mens.plan", "-m", "+hw=h200,rtx4080s", "+rung=4b", "train.micro_batch=8",
                 "train.seq_len=4096", f"hydra.sweep.dir={tmp_path}/sweep")
    assert p.returncode == 3, p.stdout + p.stderr
    no_traceback(p)
    outcomes = {json.loads((tmp_path / "sweep" / str(i) / "outcome.json").read_text())
                ["exit_code"] for i in (0, 1)}
    assert outcomes == {0, 3}
    assert "[sweep] 2 jobs, 1 ok, 1 not ok" in p.stdout


def test_sweep_of_good_jobs_exits_0(mens_cli, tmp_path):
    p = mens_cli("mens.plan", "-m", "+hw=h100", "+rung=0.6b,1.7b", "lane=lora,qlora",
                 f"hydra.sweep.dir={tmp_path}/sweep")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("[sweep] job") == 4


def test_force_overrides_a_refusal_loudly_and_records_it(mens_cli, tmp_path):
    p = mens_cli("mens.plan", "+hw=rtx4090", "+rung=32b", "lane=full", "plan.force=true",
                 f"hydra.run.dir={tmp_path}/r")
    assert p.returncode == 0
    assert "FORCED" in p.stdout
    assert json.loads((tmp_path / "r" / "plan.json").read_text())["forced"] is True


def test_planning_a_named_tier_imports_no_torch(tmp_path):
    code = (
        "import sys\n"
        "from mens.cli.plan import main\n"
        f"rc = main(['+hw=rtx4090', '+rung=8b', 'hydra.run.dir={tmp_path}/r'])\n"
        "assert rc in (0, 3), rc\n"
        "heavy = [m for m in ('torch', 'transformers', 'lightning', 'peft') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "print('clean')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 0 and "clean" in p.stdout, p.stderr


@pytest.mark.slow   # in `make test-slow` (CI runs it): keeps `make test` near 20 min
def test_spec_yaml_relaunches_the_same_run(mens_cli, tmp_path):
    first = mens_cli("mens", "spoke=structured_shell", "train.global_batch=4", "logger=none",
                     "train.max_steps=2", "train.seq_len=256", "curriculum=flat",
                     "train.eval_max_records=4",
                     f"hydra.run.dir={tmp_path}/a")
    assert first.returncode == 0, first.stderr
    again = mens_cli("mens", f"rerun={tmp_path}/a", f"hydra.run.dir={tmp_path}/b")
    assert again.returncode == 0, again.stderr
    a, b = (yaml.safe_load((tmp_path / d / "spec.yaml").read_text()) for d in "ab")
    for section in ("hw", "rung", "spoke", "lane", "curriculum", "train", "plan"):
        assert a[section] == b[section], section
    assert a["train"]["micro_batch"] != "auto" and isinstance(a["train"]["seq_len"], int)
    assert a["versions"]["hydra-core"]
    ignored = mens_cli("mens", f"rerun={tmp_path}/a", "lane=qlora")
    assert ignored.returncode == 2 and "lane=qlora" in ignored.stderr   # never silently ignored


def test_help_and_cfg_job(mens_cli):
    p = mens_cli("mens.plan", "--cfg", "job")
    assert p.returncode == 0 and "seq_len" in p.stdout


def test_ctrl_c_surfacing_as_another_exception_still_exits_130(tmp_path):
    """A KeyboardInterrupt raised inside a library's C code can come out as another exception
    (torch: a ValueError from tensor construction); that is still the user's Ctrl-C."""
    script = tmp_path / "task.py"
    script.write_text(
        "import os, signal, sys\n"
        "from mens.cli.app import main\n"
        "def task(cfg, out_dir):\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        signal.pthread_sigmask(signal.SIG_BLOCK, [])   # let the handler run\n"
        "    except KeyboardInterrupt:\n"
        "        raise ValueError('could not determine the shape of object type')\n"
        "    return 0\n"
        "sys.exit(main(task, ['+hw=cpu', f'hydra.run.dir={sys.argv[1]}']))\n")
    p = subprocess.run([sys.executable, str(script), str(tmp_path / "run")], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 130, p.stderr
    assert "interrupted (ValueError" in p.stderr and "Traceback" not in p.stderr
