"""`python -m mens.studio` = `mens studio` (mens.cli.studio)."""
import sys

from mens.cli.studio import main

if __name__ == "__main__":
    sys.exit(main())
