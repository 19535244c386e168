"""`python -m mens.compare` = `mens compare` (mens.cli.compare)."""
from mens.cli import as_main

as_main(__name__, "compare")
