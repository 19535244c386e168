"""`python -m mens.data inspect …` = `mens data inspect …` (mens.cli.data)."""
import sys

from mens.cli.data import main

if __name__ == "__main__":
    sys.exit(main())
