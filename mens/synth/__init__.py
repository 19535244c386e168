"""Synthesis, the data studio's wing: topic trees (tree.py), leaf-conditioned synthesis by a
teacher (synth.py; the teacher protocol and routing in teacher/), admission oracles and their
sandbox (oracle.py, oracle_checks.py, vox.py, admission.py), the dataset directory (dataset.py)
and curation (curate.py). Its output is records that mens.data reads like any other data."""
