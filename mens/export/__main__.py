"""`python -m mens.export` = `mens export` (mens.cli.export)."""
import sys

from mens.cli.export import main

if __name__ == "__main__":
    sys.exit(main())
