"""`python -m mens.plan` = `mens plan` (mens.cli.plan)."""
import sys

from mens.cli.plan import main

if __name__ == "__main__":
    sys.exit(main())
