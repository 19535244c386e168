"""`python -m mens.recommend [overrides]` = `mens recommend` (mens.cli.recommend)."""
import sys

from mens.cli.recommend import main

if __name__ == "__main__":
    sys.exit(main())
