"""`python -m mens.cloud estimate|launch|catalog refresh …` = `mens cloud …` (mens.cli.cloud)."""
import sys

from mens.cli.cloud import main

if __name__ == "__main__":
    sys.exit(main())
