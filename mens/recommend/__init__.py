"""`mens recommend`: recommendation.md for one machine (mens.recommend.memo) — every rung × lane
planned on it, the GGUF type to run each with, the cheapest catalogue offer (mens.cloud) for
what does not fit. Planning only: no torch."""
