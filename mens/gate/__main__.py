"""`python -m mens.gate run=DIR` = `mens gate run=DIR` (mens.cli.gate)."""
import sys

from mens.cli.gate import main

if __name__ == "__main__":
    sys.exit(main())
