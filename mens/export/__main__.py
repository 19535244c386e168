"""`python -m mens.export` = `mens export` (mens.cli.export)."""
from mens.cli import as_main

as_main(__name__, "export")
