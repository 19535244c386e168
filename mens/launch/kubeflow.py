"""`mens launch kubeflow`: trainjob.yaml in the run dir, a Kubeflow Trainer v2 TrainJob
(trainer.kubeflow.org/v1alpha1) for `kubectl apply -f`.

It runs on the `torch-distributed` ClusterTrainingRuntime (launch.runtime): the trainer
controller starts trainer.numNodes pods and sets PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK,
PET_MASTER_ADDR and PET_MASTER_PORT in each, which torchrun reads as its own flags — so the
container's command is plain `torchrun -m mens` and its args are the user's overrides. With
launch.max_restarts the command also names the c10d rendezvous at PET_MASTER_ADDR:PET_MASTER_PORT
(`trainjob`: the static one the PET_* variables give cannot restart a group). Each pod
gets resourcesPerNode (hw.devices GPUs on a GPU tier) and HF_TOKEN / WANDB_API_KEY from the
Kubernetes Secret launch.secret by name (secretKeyRef, optional): no value is ever written.

The image (launch.image) must hold this mens: a pod cannot see the wheel or checkout that
planned the run, and the runtime's default image has no mens. The run dir is
launch.run_root/<run name> inside the pods — a volume the runtime mounts there keeps it.
"""
from __future__ import annotations

import yaml

from mens.errors import ConfigError
from mens.launch.common import SECRETS, Launch
from mens.launch.torchrun import RESTART_ENV

FILE = "trainjob.yaml"
API_VERSION = "trainer.kubeflow.org/v1alpha1"
GPU = "nvidia.com/gpu"   # the NVIDIA device plugin's resource name
# node 0's pod and port as the trainer names them in PET_MASTER_ADDR / PET_MASTER_PORT
RDZV_ENDPOINT = "$(PET_MASTER_ADDR):$(PET_MASTER_PORT)"


def job_name(launch: Launch) -> str:
    """A DNS-1035 label (the TrainJob's name becomes its pods' and services' names)."""
    name = f"mens-{launch.name}"[:63].rstrip("-")
    return name


def trainjob(launch: Launch) -> dict:
    lc = launch.cfg.launch
    if not lc.image:
        raise ConfigError(
            "launch.image is unset: a Kubeflow TrainJob needs a container image with this mens "
            "installed (the runtime's default image has none): build one FROM the runtime's "
            "PyTorch image that installs this very mens (its checkout, or the wheel `mens cloud "
            "launch` writes to a run dir's wheel/) and set launch.image=<registry>/<image>:<tag>.",
            key="launch.image")
    run_dir = f"{str(lc.run_root).rstrip('/')}/{launch.name}"
    command, env = ["torchrun"], []
    if lc.max_restarts:
        # the trainer sets no PET_RDZV_*: torchrun's default (static) rendezvous always shares
        # its agent's store, which a restarted group cannot use (mens.train.launched exits 2
        # in every pod), so c10d at node 0's address — Kubernetes substitutes $(VAR) in a
        # command from the container's env — and a job id that outlives a round
        command += ["--rdzv-backend=c10d", f"--rdzv-endpoint={RDZV_ENDPOINT}",
                    f"--rdzv-id={job_name(launch)}", f"--max-restarts={lc.max_restarts}"]
        env = [{"name": RESTART_ENV, "value": "1"}]
    trainer: dict = {
        "image": str(lc.image),
        "numNodes": launch.nodes,
        "numProcPerNode": launch.devices,
        "command": [*command, "-m", "mens"],
        "args": launch.overrides(run_dir),
        "env": [{"name": name, "valueFrom": {"secretKeyRef": {
            "name": str(lc.secret), "key": name, "optional": True}}} for name in SECRETS] + env,
    }
    if launch.gpu:   # Kubernetes quantities are strings
        trainer["resourcesPerNode"] = {"limits": {GPU: str(launch.devices)}}
    metadata: dict = {"name": job_name(launch)}
    if lc.namespace:
        metadata["namespace"] = str(lc.namespace)
    return {"apiVersion": API_VERSION, "kind": "TrainJob", "metadata": metadata,
            "spec": {"runtimeRef": {"name": str(lc.runtime)}, "trainer": trainer}}


def render(launch: Launch) -> str:
    head = (f"# mens launch kubeflow: {launch.nodes} node(s) × {launch.devices} process(es) on "
            f"the {launch.cfg.launch.runtime} runtime. kubectl apply -f trainjob.yaml\n")
    return head + yaml.safe_dump(trainjob(launch), sort_keys=False)
