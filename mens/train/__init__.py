"""Train stage. In: a RunSpec + Plan and a run dir. Out: the finished run dir — telemetry.jsonl,
checkpoints/, adapter/ or model/, summary.json — through Lightning (module.py, trainer.py),
evaluated before and after (evaluate.py), with the peak measured as calibration measures it
(meter.py). run.py is the run's lifecycle; callers hook in through RunHooks."""
