"""Data stage. In: a spoke's corpus (mens/assets/corpora/<spoke>/) or the user's data.
Out: validated, mixed records (corpus.py, sources.py, formats.py), their order by curriculum
(curriculum.py), and tokenized, packed training rows with a block-diagonal mask (examples.py,
pack.py). A run asks it once (prepare.py). Synthesis and admission live in mens.synth."""
