"""`python -m mens.afk [status|pause|abort] [overrides]` = `mens afk …` (mens.cli.afk)."""
from mens.cli import as_main

as_main(__name__, "afk")
