"""Per-spoke content templates for tools/make_corpus.py (one module per spoke, helpers in
common.py). Not part of the mens package: only the generated data under mens/assets/corpora ships."""
