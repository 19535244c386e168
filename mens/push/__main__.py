"""`python -m mens.push` = `mens push` (mens.cli.push)."""
from mens.cli import as_main

as_main(__name__, "push")
