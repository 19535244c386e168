"""`python -m mens.ladder` = `mens ladder` (mens.cli.ladder)."""
import sys

from mens.cli.ladder import main

if __name__ == "__main__":
    sys.exit(main())
