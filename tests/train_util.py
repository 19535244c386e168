"""The fast CPU shape every real training in the suite uses (one list). A module of its own, not
conftest: pytest imports each folder's conftest.py as the module `conftest`, so `from conftest
import …` in a test module names whichever folder's conftest came last."""
FAST_TRAIN = ["+hw=cpu", "logger=csv", "train.seq_len=256", "train.global_batch=4",
              "train.micro_batch=4", "curriculum=flat", "train.eval_max_records=6"]
