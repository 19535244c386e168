"""Compare stage. In: one finished run dir (base vs fine-tuned) or several (side by side).
Out: compare.md / compare.json — held-out eval loss, answer divergence, KL — and loss_curves.png."""
