"""`python -m mens.launch torchrun|slurm|kubeflow|ray …` = `mens launch …` (mens.cli.launch)."""
from mens.cli import as_main

as_main(__name__, "launch")
