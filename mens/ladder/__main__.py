"""`python -m mens.ladder` = `mens ladder` (mens.cli.ladder)."""
from mens.cli import as_main

as_main(__name__, "ladder")
