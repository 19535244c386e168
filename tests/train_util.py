"""The fast CPU shape every real training in the suite uses (one list), and a run dir's copy. A module of its own, not
conftest: pytest imports each folder's conftest.py as the module `conftest`, so `from conftest
import …` in a test module names whichever folder's conftest came last."""
FAST_TRAIN = ["+hw=cpu", "logger=csv", "train.seq_len=256", "train.global_batch=4",
              "train.micro_batch=4", "curriculum=flat", "train.eval_max_records=6"]


def run_copy(run, dest):
    """A finished run's own files (spec, summary, plan, telemetry, adapter/) copied to `dest`: a
    test changes the copy, never the session's shared run."""
    import shutil

    dest.mkdir(parents=True)
    for name in ("spec.yaml", "summary.json", "plan.json", "telemetry.jsonl"):
        shutil.copy2(run / name, dest / name)
    shutil.copytree(run / "adapter", dest / "adapter")
    return dest
