"""`python -m mens.serve` = `mens serve` (mens.cli.serve)."""
from mens.cli import as_main

as_main(__name__, "serve")
