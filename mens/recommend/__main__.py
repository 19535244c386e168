"""`python -m mens.recommend [overrides]` = `mens recommend` (mens.cli.recommend)."""
from mens.cli import as_main

as_main(__name__, "recommend")
