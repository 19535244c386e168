"""`mens cloud launch`: a SkyPilot task (sky.yaml) that runs this spec on a catalogue offer.

The offer is `cloud.offer` (provider:GPU:count), else the cheapest on-demand offer that fits.
The run is planned here on the offer's tier and GPU count, and spec.yaml is written into the run
dir with that shape resolved (seq_len, micro_batch, grad_accum, checkpointing, hw tier and
devices). The remote installs the very mens that planned the run — the synced checkout, or a
wheel of the installed package shipped with the task (mens.cloud.wheel) — and gets HF_TOKEN and
WANDB_API_KEY as SkyPilot secrets by name. The remote command is `python -m mens rerun=<that run dir>`: the remote re-plans the
same pinned shape and refuses (exit 3) if it does not fit there, rather than deriving another —
the estimate that rented the GPU and the run on it cannot disagree. With hw.nodes>1 the task
asks SkyPilot for that many nodes of the offer (`num_nodes`) and the run is that command under
torchrun over SKYPILOT_NODE_IPS / SKYPILOT_NODE_RANK / SKYPILOT_NUM_NODES /
SKYPILOT_NUM_GPUS_PER_NODE (c10d store on the first node; launch.max_restarts).

With SkyPilot installed (`pip install 'mens-compiler[cloud]'`) and credentials for the provider, it runs
`sky launch`; otherwise it prints the command and exits 0. Nothing here touches the network
except that `sky launch`.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from omegaconf import DictConfig

from mens.cloud.catalog import Offer, catalog_path, find, load, network, select, tier_of
from mens.config.objectives import label as lane_label
from mens.errors import ConfigError, EXIT_OK, PlanRefused
# SECRETS: passed by name (`sky launch --secret NAME`), the names every mens launcher passes
from mens.launch.common import RDZV_PORT, SECRETS
from mens.run.rundir import RunDir

SKY_YAML = "sky.yaml"
REMOTE_RUN = "~/mens/run"          # the run dir (spec.yaml) on the remote machine
REMOTE_OUT = "~/mens/outputs"      # where the remote run writes (rsync it back)
DISK_GB = 256   # weights (32b bf16: 61 GiB), HF cache, checkpoints and outputs, with room
# Where each provider keeps the credentials SkyPilot reads (as `sky check` looks for them);
# only their presence is checked, never their content.
CREDENTIALS = {
    "runpod": ["~/.runpod/config.toml"],
    "vast": ["~/.vast_api_key", "~/.config/vastai/vast_api_key"],
    "gcp": ["~/.config/gcloud/application_default_credentials.json", "$GOOGLE_APPLICATION_CREDENTIALS"],
    "lambda": ["~/.lambda_cloud/lambda_keys"],
    "aws": ["~/.aws/credentials", "$AWS_ACCESS_KEY_ID"],
}


def choose(cfg: DictConfig) -> tuple[Offer, dict | None]:
    """(offer, its estimate row or None). cloud.offer must name a catalogue offer with a tier."""
    offers = select(cfg, load(catalog_path(cfg)))
    if cfg.cloud.offer:
        o = find(offers, cfg.cloud.offer)
        if o.tier is None:
            raise ConfigError(
                f"cloud.offer={o.id}: GPU {o.gpu} maps to no mens hw tier, so the run cannot be "
                f"planned on it. GPUs with a tier: {', '.join(sorted(tier_of()))}.",
                key="cloud.offer")
        return o, None
    from mens.cloud.estimate import estimate
    rows = [r for r in estimate(cfg)["offers"] if r["fits"]]
    if not rows:
        raise PlanRefused(f"no catalogue offer fits {cfg.rung.name} with lane {lane_label(cfg.lane)} "
                          f"(`mens cloud estimate` lists each offer and why): try a smaller "
                          f"rung, lane=qlora, or a shorter train.seq_len.")
    best = rows[0]   # ranked: fits first, then on-demand cost
    return find(offers, best["id"]), best


def infra(o: Offer) -> str:
    """SkyPilot's `infra:`: the cloud, and the region where it names one SkyPilot knows."""
    return f"{o.provider}/{o.region}" if o.provider in ("gcp", "aws", "lambda") else o.provider


def git_commit(root: Path) -> tuple[str | None, bool]:
    """(HEAD commit, working tree dirty) of a source checkout; (None, False) elsewhere."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                              text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None, False
    if head.returncode:
        return None, False
    return head.stdout.strip(), bool(dirty.stdout.strip())


REMOTE_WHEEL = "~/mens/wheel"


def secrets_here() -> list[str]:
    """The secrets set in this environment: the remote gets them by name, never as values."""
    return [name for name in SECRETS if os.environ.get(name)]


def task_yaml(cfg: DictConfig, o: Offer, spec, run_dir: Path) -> dict:
    """The SkyPilot task: resources from the offer, the exact mens that planned the run (the
    synced checkout, or a wheel of the installed package shipped as a file mount), the run
    re-launched from its spec with the shape pinned, the run dir and data files mounted."""
    import importlib.metadata as md

    from mens.resources import SOURCE_CHECKOUT, CONF_DIR

    root = CONF_DIR.parent
    commit, dirty = git_commit(root) if SOURCE_CHECKOUT else (None, False)
    try:
        torch = md.version("torch").split("+")[0]
    except md.PackageNotFoundError:
        torch = "2.13.0"
    task: dict = {"name": cluster_name(cfg), "resources": {
        "infra": infra(o), "accelerators": f"{o.gpu}:{o.count}", "use_spot": bool(cfg.cloud.spot),
        "disk_size": DISK_GB}}
    mounts = {REMOTE_RUN: str(run_dir.resolve())}
    for path in _data_files(spec):   # the user's data at the same absolute path as in spec.yaml
        mounts[path] = path
    secrets = secrets_here()
    task["envs"] = {"MENS_COMMIT": commit or "",
                    # online where a wandb key goes with the run (a secret), else offline
                    "WANDB_MODE": "online" if "WANDB_API_KEY" in secrets else "offline"}
    if secrets:   # names only: `sky launch --secret NAME` takes each value from this environment
        task["secrets"] = {name: None for name in secrets}
    if SOURCE_CHECKOUT:   # the checkout is synced as the workdir and installed from there
        task["workdir"] = str(root)
        install = ('pip install -e ".[slurm]"  # mens from the synced checkout'
                   + (f" at {commit[:12]}" if commit else ""))
        check = ('test -z "$MENS_COMMIT" || test ! -d .git || test "$(git rev-parse HEAD)" = '
                 '"$MENS_COMMIT"  # the synced tree is the commit planned here')
    else:                 # never a name lookup on an index: the wheel of this very install
        from mens.cloud.wheel import installed_wheel

        wheel = installed_wheel(run_dir / "wheel")
        remote = f"{REMOTE_WHEEL}/{wheel.name}"
        mounts[remote] = str(wheel.resolve())
        install = (f'pip install "{remote.replace("~", "$HOME", 1)}[slurm]"  # the exact mens '
                   f'that planned this run (shipped, not fetched)')
        check = "true"
    task["file_mounts"] = mounts
    task["setup"] = "\n".join([
        "set -e",
        f'pip install "torch=={torch}"  # first, pinned, as `make install` does',
        install, check])
    # $HOME, not ~: neither the shell (after `=`) nor Hydra expands a tilde there
    remote_run, remote_out = (p.replace("~", "$HOME", 1) for p in (REMOTE_RUN, REMOTE_OUT))
    mens_args = f'rerun="{remote_run}" hydra.run.dir="{remote_out}/{run_dir.name}"'
    nodes = int(cfg.hw.nodes)
    if nodes > 1:   # SkyPilot starts the run on every node; torchrun makes them one world
        task["num_nodes"] = nodes
        task["run"] = "\n".join(["set -e", *multi_node_run(task["name"], cfg, mens_args)])
    else:
        task["run"] = "\n".join(["set -e", f"python -m mens {mens_args}"])
    if dirty:
        print(f"mens: note: the checkout has uncommitted changes: the remote installs the synced "
              f"working tree (commit {commit[:12]} plus them), not the commit alone")
        task["envs"]["MENS_DIRTY"] = "1"
    return task


def multi_node_run(name: str, cfg: DictConfig, mens_args: str) -> list[str]:
    """torchrun over SkyPilot's node variables: node 0 (the first of SKYPILOT_NODE_IPS) holds
    the c10d store; each node starts SKYPILOT_NUM_GPUS_PER_NODE processes. The arguments stay
    unquoted variables so that the remote shell expands them."""
    from mens.launch.torchrun import restart_env, torchrun_args

    args = torchrun_args("$SKYPILOT_NUM_NODES", "$SKYPILOT_NUM_GPUS_PER_NODE",
                         "$SKYPILOT_NODE_RANK", f"$MENS_RDZV_HOST:{RDZV_PORT}", name,
                         int(cfg.launch.max_restarts))
    return ['MENS_RDZV_HOST=$(echo "$SKYPILOT_NODE_IPS" | head -n1)',
            *(f"export {kv}" for kv in restart_env(int(cfg.launch.max_restarts))),
            " ".join([*args, "-m", "mens", mens_args])]


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(str, lambda d, s: d.represent_scalar(
    "tag:yaml.org,2002:str", s, style="|" if "\n" in s else None))


def dump(task: dict) -> str:
    """YAML with multi-line scripts as literal blocks (readable setup/run)."""
    return yaml.dump(task, Dumper=_Dumper, sort_keys=False)


def _data_files(spec) -> list[str]:
    if spec.data.source != "file":
        return []
    paths = spec.data.path if isinstance(spec.data.path, (list, tuple)) else [spec.data.path]
    out = [str(Path(p).expanduser().resolve()) for p in paths if p]
    return [p for p in out if Path(p).exists()]


def cluster_name(cfg: DictConfig) -> str:
    return f"mens-{cfg.rung.name}-{cfg.lane.name}".replace(".", "-").replace("_", "-").lower()


def has_credentials(provider: str) -> bool:
    for c in CREDENTIALS.get(provider, []):
        if c.startswith("$"):
            if os.environ.get(c[1:]):
                return True
        elif Path(os.path.expanduser(c)).exists():
            return True
    return False


def sky_available() -> bool:
    import importlib.util
    return importlib.util.find_spec("sky") is not None and sky_cli() is not None


def sky_cli() -> str | None:
    """The `sky` command: beside this Python (a venv not on PATH), else on PATH."""
    here = Path(sys.executable).parent / "sky"
    return str(here) if here.is_file() else shutil.which("sky")


def launch_run(cfg: DictConfig, out_dir: Path) -> int:
    """Plan on the chosen offer, write spec.yaml, plan.json and sky.yaml; launch or print."""
    from mens.cloud.estimate import offer_config
    from mens.plan.output import plan_run

    o, row = choose(cfg)
    print(f"mens cloud launch · offer {o.id} ({o.tier} × {o.count}"
          f"{f' per node × {cfg.hw.nodes} nodes' if cfg.hw.nodes > 1 else ''}, ${o.price_hour:g}/h"
          f"{f', spot ${o.spot_price_hour:g}/h' if o.spot_price_hour is not None else ''}; "
          f"{o.source}, {o.date})" + (f" · est. {row['est_hours']:.2f} h, "
                                       f"${row['est_cost_usd']:,.2f}" if row and
                                       row.get("est_cost_usd") is not None else ""))
    if cfg.cloud.spot and o.spot_price_hour is None:
        raise ConfigError(f"cloud.spot=true but offer {o.id} has no spot price in the catalogue: "
                          f"choose an offer with one, or cloud.spot=false.", key="cloud.spot")
    # the offer is one node's GPUs; the run has hw.nodes of them, over the provider's network
    # between nodes: the same plan `mens cloud estimate` priced
    net = network(o.provider, o.gpu) if cfg.hw.nodes > 1 else None
    planned = offer_config(cfg, o.tier, o.count, net)
    spec, plan = plan_run(planned, out_dir, "plan")   # refuses: exit 3
    run = RunDir(out_dir)
    task = task_yaml(cfg, o, spec, out_dir)
    path = run.write_text(SKY_YAML, dump(task))
    cmd = [sky_cli() or "sky", "launch", "-c", task["name"], str(path),
           *(a for name in task.get("secrets", {}) for a in ("--secret", name))]
    print(f"wrote {path}")
    if sky_available() and has_credentials(o.provider):
        print(f"mens: launching: {shlex.join(cmd)}")
        return subprocess.call(cmd)
    why = "SkyPilot is not installed (`pip install 'mens-compiler[cloud]'`)" if not sky_available() else \
        f"no {o.provider} credentials found ({', '.join(CREDENTIALS.get(o.provider, []))}; " \
        f"`sky check {o.provider}` says how to add them)"
    print(f"mens: note: not launched: {why}. To launch:\n  {shlex.join(cmd)}\n"
          f"then bring the outputs back:\n  rsync -Pavz {task['name']}:{REMOTE_OUT}/ "
          f"{out_dir}/remote/")
    return EXIT_OK
