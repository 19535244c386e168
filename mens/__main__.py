"""`python -m mens [overrides]` = `mens train`: compile, plan, then train (mens.cli.train)."""
from mens.cli import as_main

as_main(__name__, "train")
