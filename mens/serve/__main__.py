"""`python -m mens.serve` = `mens serve` (mens.cli.serve)."""
import sys

from mens.cli.serve import main

if __name__ == "__main__":
    sys.exit(main())
