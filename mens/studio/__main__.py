"""`python -m mens.studio` = `mens studio` (mens.cli.studio)."""
from mens.cli import as_main

as_main(__name__, "studio")
