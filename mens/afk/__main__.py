"""`python -m mens.afk [status|pause|abort] [overrides]` = `mens afk …` (mens.cli.afk)."""
import sys

from mens.cli.afk import main

if __name__ == "__main__":
    sys.exit(main())
