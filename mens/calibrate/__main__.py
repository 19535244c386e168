"""`python -m mens.calibrate` = `mens calibrate` (mens.cli.calibrate)."""
from mens.cli import as_main

as_main(__name__, "calibrate")
