"""Where a run goes besides this machine: `launch` (torchrun, SLURM, Kubeflow, Ray files),
`cloud` (estimates and launches from the offers catalogue), `recommend`, and `calibrate` (the
measurements the planner's contract is fitted on), with their valid values."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from mens.config.ranges import Range, count, nonneg, pos


@dataclass
class CalibrateConfig:
    # python -m mens.calibrate: one record per run dir (calibration.json)
    steps: int = 3                   # optimizer steps measured (step 2 is the first with Adam state)
    role: str = "fit"                # fit | held_out (held-out records test a fit, never enter it)
    eval_records: int = 2            # train.eval_max_records when that is null: evaluation is not measured
    max_rss_gb: Optional[float] = None        # guard: kill the child above this RSS → a lower-bound record
    max_predicted_gb: Optional[float] = None  # do not run shapes predicted above this → a skipped record
    timeout_s: float = 7200.0
    # record files (JSONL/dirs/globs) whose finished measurement of the same job (role, cell,
    # architecture, shape, paths, world) counts as done: a sweep longer than one sitting goes on
    # from committed records instead of starting again
    skip_recorded: List[str] = field(default_factory=list)
    keep_outputs: bool = False       # keep checkpoints/, model/, adapter/ (random weights: usually not)
    weights_cache: str = "outputs/calibration/weights"   # random weights written for qlora rungs
    # python -m mens.fit: records → fitted cells in the contract, and a report
    records: List[str] = field(default_factory=lambda: ["calibration/cpu.jsonl",
                                                        "calibration/external"])  # files, dirs, globs
    save_records: Optional[str] = None   # also write every collected record to this JSONL
    out: Optional[str] = None        # written contract (null: plan.contract; else the shipped one, checkout only)
    check: bool = False              # compare a fresh fit with the contract instead of writing it
    report: Optional[str] = None     # report dir (null: the command's run dir)


@dataclass
class CloudConfig:
    # mens cloud estimate | launch | catalog refresh (mens.cloud)
    catalog: Optional[str] = None    # offers CSV; null = the dated catalogue mens ships
    providers: List[str] = field(default_factory=list)   # [] = every provider in the catalogue
    mfu: Optional[float] = None      # null: the plan's speed model (measured); a number: ASSUMED MFU instead
    setup_hours: float = 0.25        # set-up + download time added to each estimate
    max_age_days: int = 90           # a catalogue older than this is said on every estimate
    top: int = 20                    # rows of the ranked table (estimate.json keeps all)
    offer: Optional[str] = None      # launch: an offer id from estimate.json; null = cheapest that fits
    spot: bool = False               # launch on spot capacity
    sky_catalogs: str = "~/.sky/catalogs/v8"   # catalog refresh reads <cloud>/vms.csv here
    tokens: Optional[int] = None     # training tokens of one run; null = the spoke's corpus × epochs (estimated)


@dataclass
class LaunchConfig:
    # mens launch torchrun | slurm | kubeflow (mens.launch): a file that starts `python -m mens
    # <the same overrides>` on hw.nodes nodes × hw.devices processes; mens spawns nothing itself.
    # mens launch ray: Ray Train's workers start them on a Ray cluster (mens.launch.ray)
    # torchrun: host:port of the c10d store on node 0, which every node must reach; null = one
    # node only (127.0.0.1:29500, torchrun's default port)
    rdzv_endpoint: Optional[str] = None
    # torchrun --max-restarts (also sky.yaml's with hw.nodes>1); ray: FailureConfig(max_failures)
    max_restarts: int = 0
    partition: Optional[str] = None  # slurm: #SBATCH --partition; null = the cluster's default
    account: Optional[str] = None    # slurm: #SBATCH --account; null = the user's default
    time: Optional[str] = None       # slurm: #SBATCH --time (e.g. 1-00:00:00); null = partition's
    image: Optional[str] = None      # kubeflow: a container image with this mens installed
    runtime: str = "torch-distributed"   # kubeflow: the ClusterTrainingRuntime it runs on
    namespace: Optional[str] = None  # kubeflow: metadata.namespace; null = kubectl's current
    secret: str = "mens-secrets"     # kubeflow: the Secret whose HF_TOKEN / WANDB_API_KEY keys the pods read
    run_root: str = "/mnt/mens/outputs"   # kubeflow: the pods' run dirs (a volume the runtime mounts)
    # ray: the running cluster to start the workers on (host:port, ray://host:port, auto);
    # null = a local Ray started for this run on this machine
    ray_address: Optional[str] = None
    # ray: seconds to wait for the cluster to place the workers (busy, or nodes still joining;
    # an autoscaler's new GPU node takes minutes) before giving up, exit 4
    ray_wait_s: float = 600.0


@dataclass
class RecommendConfig:
    # mens recommend: recommendation.md for one machine (mens.recommend.memo)
    rungs: List[str] = field(default_factory=lambda: ["0.6b", "1.7b", "4b", "8b", "14b", "32b",
                                                      "gpt-oss-20b", "qwen3-30b-a3b"])
    lanes: List[str] = field(default_factory=lambda: ["lora", "qlora", "full"])


# Every number of these sections and its valid values (mens.config.validate): null is accepted
# wherever the field is Optional (its meaning is in the note); `[]`: every list item.
RANGES = {
    "launch.max_restarts": nonneg("restarts torchrun (or Ray) makes of a failed group (each "
                                  "resumes from the last checkpoint)", "1"),
    "launch.ray_wait_s": pos("seconds `mens launch ray` waits for the cluster to place its "
                             "workers before giving up (exit 4)", "600"),
    "cloud.mfu": Range(lo=0, hi=1, lo_open=True, example="0.35",
                       note="an assumed model FLOPs utilisation replacing the measured speed "
                            "model; null: the speed model"),
    "cloud.setup_hours": nonneg("hours of set-up and download added to each estimate", "0.25"),
    "cloud.max_age_days": count("days after which the catalogue is called old", "90"),
    "cloud.top": count("rows of the ranked table", "20"),
    "cloud.tokens": count("training tokens of one run; null: the spoke's corpus × epochs", "5000000"),
    "calibrate.steps": Range(lo=2, integer=True, example="3",
                             note="optimizer steps measured; step 2 is the first with Adam state"),
    "calibrate.eval_records": count("held-out records scored when train.eval_max_records is "
                                    "null", "2"),
    "calibrate.max_rss_gb": pos("GiB of RSS that kills the child; null: no guard", "48"),
    "calibrate.max_predicted_gb": pos("GiB of predicted peak above which a shape is skipped; "
                                      "null: run every shape", "48"),
    "calibrate.timeout_s": pos("seconds before the child is killed", "7200"),
}
CHOICES: dict = {}
