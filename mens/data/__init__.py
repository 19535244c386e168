"""Data stage. In: a spoke's corpus (mens/assets/corpora/<spoke>/) and its admission check.
Out: validated, mixed records (corpus.py), their order by curriculum (curriculum.py), and
tokenized, packed training rows with a block-diagonal mask (examples.py, pack.py)."""
