"""`python -m mens [overrides]` = `mens train`: compile, plan, then train (mens.cli.train)."""
import sys

from mens.cli.train import main

if __name__ == "__main__":
    sys.exit(main())
