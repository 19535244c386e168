"""Training objectives: what the weights are trained toward (SFT, DPO, ORPO, SimPO, KTO, GRPO),
crossed with the lane's method (LoRA, QLoRA, full) that says how they train. One module per
objective owns its batch, loss, reference pass and metrics; the torch-free facts the config,
data and planning stages read are its card in mens.config.objectives."""
