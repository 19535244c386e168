"""`python -m mens.fit` = `mens fit` (mens.cli.fit; the fit itself is mens.calibrate.fit)."""
from mens.cli import as_main

as_main(__name__, "fit")
