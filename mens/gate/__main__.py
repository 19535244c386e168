"""`python -m mens.gate run=DIR` = `mens gate run=DIR` (mens.cli.gate)."""
from mens.cli import as_main

as_main(__name__, "gate")
