"""`mens launch torchrun|slurm|kubeflow`: each emitted file against its golden file and against
the engine's own reader — torchrun's argument parser, `bash -n`, the Kubeflow trainer's API
models — plus the user's overrides forwarded unchanged and secrets never written.

Golden files: tests/launch/golden/, with this run's dir written as <RUN_DIR>. After a deliberate
change, MENS_UPDATE_GOLDEN=1 rewrites them (then read the diff)."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

GOLDEN = Path(__file__).parent / "golden"
SECRET = "hf_not-a-real-token-4f1c"   # set as HF_TOKEN for every emitter: it must appear nowhere
# what a user types: a GPU tier on two nodes, a rung, a lane, a value that needs shell quoting
USER = ["+hw=h100", "hw.devices=8", "hw.nodes=2", "+rung=8b", "lane=full",
        "data.system_prompt='You are terse.'"]


def emit(tmp_path: Path, engine: str, *args: str, name: str = "run-1"):
    """`python -m mens.launch ENGINE args hydra.run.dir=<tmp>/<name>` in a subprocess."""
    run = tmp_path / name
    env = {**os.environ, "HOME": str(tmp_path / "home"), "HF_TOKEN": SECRET}
    env.pop("HYDRA_FULL_ERROR", None)
    p = subprocess.run([sys.executable, "-m", "mens.launch", engine, *args,
                        f"hydra.run.dir={run}"], capture_output=True, text=True, cwd=tmp_path,
                       env=env, timeout=120)
    return p, run


# each engine's file for USER, emitted once for the tests that read it (planning 8b takes seconds)
EXTRA = {"torchrun": ("launch.rdzv_endpoint=node0:29400", "launch.max_restarts=1"),
         "slurm": ("launch.partition=gpu", "launch.time=1-00:00:00"),
         "kubeflow": ("launch.image=registry.example/mens:0.1.0", "launch.namespace=ml",
                      "launch.max_restarts=2")}


@pytest.fixture(scope="module")
def emitted(tmp_path_factory):
    out = {}

    def get(engine: str):
        if engine not in out:
            out[engine] = emit(tmp_path_factory.mktemp(engine), engine, *USER, *EXTRA[engine])
            assert out[engine][0].returncode == 0, out[engine][0].stderr
        return out[engine]
    return get


def golden(name: str, text: str, run: Path) -> None:
    text = text.replace(str(run), "<RUN_DIR>")
    path = GOLDEN / name
    if os.environ.get("MENS_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from its golden file (see the docstring)"


def no_secret(run: Path, stdout: str) -> None:
    assert SECRET not in stdout
    for f in run.rglob("*"):
        if f.is_file():
            assert SECRET not in f.read_text(errors="replace"), f


def forwarded(run: Path, extra: tuple[str, ...] = ()) -> list[str]:
    """The user's overrides unchanged (launch.* dropped), then the shared run dir."""
    return [*USER, *extra, f"hydra.run.dir={run}"]


def test_torchrun_one_line_per_node_read_by_torchruns_own_parser(emitted):
    from torch.distributed.run import get_args_parser

    p, run = emitted("torchrun")
    text = (run / "torchrun.sh").read_text()
    assert text in p.stdout                                   # printed as written
    golden("torchrun.sh", text, run)
    assert subprocess.run(["bash", "-n", run / "torchrun.sh"]).returncode == 0
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert len(lines) == 2                                    # hw.nodes
    for rank, line in enumerate(lines):
        env, argv = shlex.split(line)[:1], shlex.split(line)[1:]
        # --max-restarts: the store unshared, or mens exits 2 (mens.train.launched)
        assert env == ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"] and argv[0] == "torchrun"
        a = get_args_parser().parse_args(argv[1:])
        assert (a.nnodes, a.nproc_per_node, a.node_rank) == ("2", "8", rank)
        assert (a.rdzv_backend, a.rdzv_endpoint, a.rdzv_id) == ("c10d", "node0:29400", "run-1")
        assert a.max_restarts == 1 and a.module and a.training_script == "mens"
        assert a.training_script_args == forwarded(run)     # the same command on every node
    no_secret(run, p.stdout)


def test_torchrun_on_one_node_needs_no_endpoint_and_no_restarts_flag(tmp_path):
    p, run = emit(tmp_path, "torchrun", "+hw=cpu", "hw.devices=2")
    assert p.returncode == 0, p.stderr
    (line,) = [s for s in (run / "torchrun.sh").read_text().splitlines() if s[0] != "#"]
    assert "--nnodes=1 --nproc-per-node=2 --node-rank=0" in line
    assert "--rdzv-endpoint=127.0.0.1:29500" in line and "--max-restarts" not in line
    assert line.startswith("torchrun ")   # no restarts: torch's default store is fine


def test_sbatch_passes_bash_n_and_asks_for_nodes_tasks_and_gpus(emitted):
    p, run = emitted("slurm")
    script = run / "sbatch.sh"
    golden("sbatch.sh", script.read_text(), run)
    check = subprocess.run(["bash", "-n", script], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    lines = script.read_text().splitlines()
    sbatch = dict(s.removeprefix("#SBATCH --").split("=", 1) for s in lines
                  if s.startswith("#SBATCH "))
    assert (sbatch["nodes"], sbatch["ntasks-per-node"], sbatch["gpus-per-node"]) == ("2", "8", "8")
    assert sbatch["job-name"] not in ("bash", "interactive")   # else Lightning ignores SLURM
    assert shlex.split(lines[-1]) == ["srun", "python", "-m", "mens", *forwarded(run)]
    no_secret(run, p.stdout)


def test_sbatch_on_a_cpu_tier_asks_for_no_gpus(tmp_path):
    p, run = emit(tmp_path, "slurm", "+hw=cpu", "hw.devices=2", "hw.nodes=3")
    assert p.returncode == 0, p.stderr
    text = (run / "sbatch.sh").read_text()
    assert "#SBATCH --nodes=3" in text and "#SBATCH --ntasks-per-node=2" in text
    assert "gpus" not in text


def sbatch_options(script: str) -> list[str]:
    """The options sbatch takes from a script, read as Slurm reads them (src/sbatch/opt.c:
    _opt_batch_script, _get_argument): the #SBATCH lines until the first command; in each,
    whitespace ends a word, "…" or '…' groups, a backslash escapes the next character (in
    quotes too), an unquoted # ends the line's options; the quotes are not part of the word."""
    words = []
    for line in script.splitlines():
        if not line.startswith("#SBATCH"):
            if line.strip() and not line.lstrip().startswith("#"):
                break
            continue
        i, rest = 0, line[len("#SBATCH"):]
        while True:
            while i < len(rest) and rest[i].isspace():
                i += 1
            word, quote, escape = None, None, False
            while i < len(rest) and (quote or not rest[i].isspace()):
                c, i = rest[i], i + 1
                if escape:
                    escape = False
                elif c == "\\":
                    escape = True
                    continue
                elif quote:
                    if c == quote:
                        quote = None
                        continue
                elif c in "\"'":
                    quote = c
                    continue
                elif c == "#":
                    break
                word = (word or "") + c
            assert quote is None, f"sbatch: unmatched {quote} in {line!r}"
            if word is None:
                break
            words.append(word)
    return words


def slurm_filename(pattern: str, job_id: str) -> str:
    """A --output filename pattern as SLURM fills it in: %j the job id, %% a %."""
    return re.sub(r"%([%j])", lambda m: "%" if m[1] == "%" else job_id, pattern)


def test_sbatch_reads_a_run_dir_with_a_space_and_a_percent_as_one_path(tmp_path):
    """Unquoted, `--output=<dir with a space>/slurm-%j.out` ends at the space: the log went to
    the dir's first word (and a % of the dir's own is a SLURM pattern)."""
    p, run = emit(tmp_path, "slurm", "+hw=cpu", "hw.devices=2", "launch.account=team a",
                  name="my run 100%")
    assert p.returncode == 0, p.stderr
    text = (run / "sbatch.sh").read_text()
    assert subprocess.run(["bash", "-n", run / "sbatch.sh"]).returncode == 0
    opts = dict(w.removeprefix("--").partition("=")[::2] for w in sbatch_options(text))
    assert slurm_filename(opts["output"], "42") == f"{run}/slurm-42.out"
    assert (opts["account"], opts["nodes"], opts["ntasks-per-node"]) == ("team a", "1", "2")
    assert shlex.split(text.splitlines()[-1])[-1] == f"hydra.run.dir={run}"   # srun: bash's quoting


def test_trainjob_name_and_pod_run_dir_carry_the_date():
    """Hydra's default run dir is outputs/<date>/<time>_<job>: the same second of another day
    must name another TrainJob and another run dir in the pods; names stay DNS-1035 labels."""
    from mens.config.compose import compose
    from mens.launch.common import Launch
    from mens.launch.kubeflow import trainjob

    cfg = compose(["+hw=cpu", "launch.image=registry.example/mens:1"])

    def job(run_dir: str) -> tuple[str, str]:
        j = trainjob(Launch(cfg, Path("/home/u/outputs") / run_dir, []))
        return j["metadata"]["name"], j["spec"]["trainer"]["args"][-1]

    today, tomorrow = (job(f"2026-12-0{d}/16-04-33_launch_kubeflow") for d in (6, 7))
    assert today[0] != tomorrow[0] and today[1] != tomorrow[1]
    assert today == ("mens-2026-12-06-16-04-33-launch-kubeflow",
                     "hydra.run.dir=/mnt/mens/outputs/2026-12-06-16-04-33-launch-kubeflow")
    long = job("2026-12-06/16-04-33_" + "Long_Name." * 9)
    for name, _ in (today, tomorrow, long):
        assert len(name) <= 63 and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name), name


def trainjob_model():
    pytest.importorskip("kubeflow_trainer_api", reason="the dev extra installs "
                        "kubeflow-trainer-api (the Kubeflow Trainer's published API models)")
    from kubeflow_trainer_api.models import TrainerV1alpha1TrainJob
    return TrainerV1alpha1TrainJob


def test_trainjob_validates_against_the_kubeflow_trainer_api_models(emitted):
    TrainJob = trainjob_model()
    p, run = emitted("kubeflow")
    text = (run / "trainjob.yaml").read_text()
    golden("trainjob.yaml", text, run)
    raw = yaml.safe_load(text)
    job = TrainJob.from_dict(raw)   # pydantic: wrong types and missing required fields raise
    # the models drop keys they do not know: an equal round trip means every key is the API's
    assert job.to_dict() == raw
    t = job.spec.trainer
    assert (job.api_version, job.kind, job.spec.runtime_ref.name) == \
        ("trainer.kubeflow.org/v1alpha1", "TrainJob", "torch-distributed")
    assert (t.num_nodes, t.num_proc_per_node) == (2, 8)
    assert t.resources_per_node.limits["nvidia.com/gpu"].actual_instance == "8"
    # the trainer sets PET_NNODES, PET_NODE_RANK… which torchrun reads as its flags
    # --max-restarts: c10d at node 0 (the static rendezvous of PET_* shares the agent's store),
    # a job id that outlives a round, and the store unshared (mens.train.launched)
    assert t.command == ["torchrun", "--rdzv-backend=c10d",
                         "--rdzv-endpoint=$(PET_MASTER_ADDR):$(PET_MASTER_PORT)",
                         "--rdzv-id=" + job.metadata.name, "--max-restarts=2", "-m", "mens"]
    # the user's overrides; the run dir is the pods' (launch.run_root), not this machine's
    assert t.args == [*USER, "hydra.run.dir=/mnt/mens/outputs/run-1"]
    assert {e.name: e.value for e in t.env if e.value_from is None} == {
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    refs = {e.name: e.value_from.secret_key_ref for e in t.env if e.value_from is not None}
    assert set(refs) == {"HF_TOKEN", "WANDB_API_KEY"}
    assert all(e.value is None for e in t.env if e.name in refs)
    assert {r.name for r in refs.values()} == {"mens-secrets"}
    no_secret(run, p.stdout)


def test_the_api_models_catch_what_they_are_asked_to(emitted):
    """The check above can fail: a misspelt key breaks the round trip, a wrong type raises."""
    import pydantic
    TrainJob = trainjob_model()
    p, run = emitted("kubeflow")
    raw = yaml.safe_load((run / "trainjob.yaml").read_text())
    typo = {**raw, "spec": {**raw["spec"], "trainer": {**raw["spec"]["trainer"], "numNode": 2}}}
    assert TrainJob.from_dict(typo).to_dict() != typo
    wrong = {**raw, "spec": {**raw["spec"], "trainer": {**raw["spec"]["trainer"],
                                                         "numNodes": "2"}}}
    with pytest.raises(pydantic.ValidationError):
        TrainJob.from_dict(wrong)


def k8s_expand(word: str, env: dict) -> str:
    """$(NAME) in a container's command or args as Kubernetes expands it (the kubelet's
    third_party/forked/golang/expansion): a variable of the container's env by its value, $$
    as $, any other reference as written."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m[0] == "$$" else env.get(m[1], m[0]), word)


@pytest.mark.parametrize("nodes", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_a_restarting_trainjob_runs_under_the_trainers_pet_variables(tmp_path, nodes):
    """launch.max_restarts on Kubeflow: each pod's command run as the trainer runs it, on
    `nodes` "pods" of one process on loopback — the PET_* variables the torch plugin sets
    (node 0's address: 127.0.0.1 here), the job's own env, $(VAR) expanded as Kubernetes does.
    torchrun must meet and mens's restart check pass: with PET_* alone torchrun's static
    rendezvous shares its agent's store, and mens exited 2 in every pod. `--cfg job` before the
    job's args: once its launcher checks pass, mens prints its config and trains nothing. Two
    pods (13 s here: slow): both agents take 127.0.0.1 for their own address, one hosts the
    c10d store and the other joins it."""
    import socket

    import psutil

    from launched_util import clean_env

    with socket.socket() as s:   # a port free on loopback now, for node 0's c10d store
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p, run = emit(tmp_path, "kubeflow", "+hw=cpu", f"hw.nodes={nodes}", "hw.devices=1",
                  "launch.image=registry.example/mens:1", "launch.max_restarts=1",
                  f"launch.run_root={tmp_path / 'pods'}")
    assert p.returncode == 0, p.stderr
    trainer = yaml.safe_load((run / "trainjob.yaml").read_text())["spec"]["trainer"]
    pet = {"PET_NNODES": str(trainer["numNodes"]), "PET_MASTER_ADDR": "127.0.0.1",
           "PET_NPROC_PER_NODE": str(trainer["numProcPerNode"]), "PET_MASTER_PORT": str(port)}
    pods = []
    try:
        for rank in range(trainer["numNodes"]):
            env = {**clean_env(), **pet, "PET_NODE_RANK": str(rank),
                   **{e["name"]: e["value"] for e in trainer["env"] if "value" in e}}
            command, args = ([k8s_expand(w, env) for w in trainer[k]]
                             for k in ("command", "args"))
            assert command[0] == "torchrun"
            pods.append(subprocess.Popen(
                [sys.executable, "-m", "torch.distributed.run", *command[1:], "--cfg", "job",
                 *args],
                env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, start_new_session=True))
        for pod in pods:
            out, err = pod.communicate(timeout=120)
            assert pod.returncode == 0, err[-4000:]
            assert "lane:" in out   # mens's config, printed by the pod's one rank
    finally:
        for pod in pods:
            if pod.poll() is None:
                for child in psutil.Process(pod.pid).children(recursive=True):
                    child.kill()
                pod.kill()
                pod.wait()


@pytest.mark.parametrize("engine, args, key", [
    ("slurm", ["hw.nodes=0"], "hw.nodes"),
    ("torchrun", ["+hw=h100", "hw.nodes=2"], "hw.devices"),          # auto GPUs per node
    ("torchrun", ["+hw=cpu", "hw.nodes=2"], "launch.rdzv_endpoint"),  # nodes must meet somewhere
    ("torchrun", ["+hw=cpu", "launch.rdzv_endpoint=node0"], "launch.rdzv_endpoint"),
    ("kubeflow", ["+hw=cpu"], "launch.image"),
    ("slurm", ["launch.max_restarts=-1"], "launch.max_restarts"),
    ("slurm", ["-m", "hw.nodes=1,2"], "-m"),
    ("slurm", ["hw.nodes=2"], "hw=auto"),   # this machine's tier is not the nodes'
])
def test_config_errors_exit_2_with_one_paragraph_and_write_nothing(tmp_path, engine, args, key):
    p, run = emit(tmp_path, engine, *args)
    assert p.returncode == 2, (p.stdout, p.stderr)
    (line,) = [s for s in p.stderr.splitlines() if s.startswith("mens: error (exit 2): ")]
    assert key in line and "Traceback" not in p.stderr
    assert not list(run.glob("*.sh")) and not (run / "trainjob.yaml").exists()


def test_a_run_that_does_not_fit_is_refused_before_any_launcher_names_it(tmp_path):
    p, run = emit(tmp_path, "slurm", "+hw=rtx4090", "hw.devices=1", "hw.nodes=2", "+rung=32b",
                  "lane=full")
    assert p.returncode == 3 and "refuses" in p.stderr
    assert (run / "plan.json").exists() and not (run / "sbatch.sh").exists()


def test_the_plan_beside_the_launcher_is_per_device_of_nodes_times_devices(emitted):
    import json
    p, run = emitted("slurm")
    plan = json.loads((run / "plan.json").read_text())
    assert (plan["hw"], plan["verdict"], plan["world_size"]) == ("h100", "fits", 16)
    spec = yaml.safe_load((run / "spec.yaml").read_text())
    assert (spec["hw"]["nodes"], spec["hw"]["devices"]) == (2, 8)
