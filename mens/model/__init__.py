"""Model stage: the one loading API. In: a rung, a lane, a backend (and options). Out: the base
model with the lane applied (LoRA / QLoRA / full / DPO's policy) and its tokenizer — used by
training, serving, compare, calibration and the meter alike (load.py)."""
