"""`python -m mens.eval run=DIR` = `mens eval run=DIR` (mens.cli.eval)."""
from mens.cli import as_main

as_main(__name__, "eval")
