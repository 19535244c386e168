"""`python -m mens.plan` = `mens plan` (mens.cli.plan)."""
from mens.cli import as_main

as_main(__name__, "plan")
