"""`python -m mens.data inspect …` = `mens data inspect …` (mens.cli.data)."""
from mens.cli import as_main

as_main(__name__, "data")
