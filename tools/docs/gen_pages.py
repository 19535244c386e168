"""mkdocs-gen-files' script (mkdocs.yml): writes the reference pages into the build, generated
from the code by tools.docs.reference — over the committed copies under docs/reference/ (which
a test holds equal to these), so a built site is never older than its code."""
import sys
from pathlib import Path

import mkdocs_gen_files

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the checkout: tools.docs, mens

from tools.docs.reference import PAGES  # noqa: E402

for path, page in PAGES.items():
    with mkdocs_gen_files.open(path, "w") as f:
        f.write(page())
