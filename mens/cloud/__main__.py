"""`python -m mens.cloud estimate|launch|catalog refresh …` = `mens cloud …` (mens.cli.cloud)."""
from mens.cli import as_main

as_main(__name__, "cloud")
