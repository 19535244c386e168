"""`python -m mens.compare` = `mens compare` (mens.cli.compare)."""
import sys

from mens.cli.compare import main

if __name__ == "__main__":
    sys.exit(main())
