"""`python -m mens.fit` = `mens fit` (mens.cli.fit; the fit itself is mens.calibrate.fit)."""
import sys

from mens.cli.fit import main

if __name__ == "__main__":
    sys.exit(main())
