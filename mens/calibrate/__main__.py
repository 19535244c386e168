"""A `python -m` entry: the command that declares this module (mens.cli.COMMANDS) runs."""
from mens.cli import as_main

as_main(__spec__, __name__)
