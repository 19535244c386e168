"""`python -m mens.calibrate` = `mens calibrate` (mens.cli.calibrate)."""
import sys

from mens.cli.calibrate import main

if __name__ == "__main__":
    sys.exit(main())
