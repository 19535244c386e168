"""`mens eval` (issue #27): did fine-tuning help, and what did it cost? One stage, writing
`eval.json` + `eval.md` into the run dir (or `outputs/<date>/<time>_eval/` for a base alone),
a wandb run of job_type `eval`, and a telemetry-style record.

Modules:
  stats    — intervals over items (paired for base vs tuned: bootstrap; exact sign-flip below
             20 items), verdicts with a floor (eval.min_items), the unbiased pass@k
  harness  — lm-evaluation-harness over mens's own model loader (HFLM on a PeftModel / merged)
  indomain — in-domain oracle scoring: greedy + k samples per held-out prompt, every verdict kept
  toolcalls — tool-call turns of held-out records that use tools: exact, schema-valid, relevance
  judge    — pairwise base-vs-tuned through the teacher cascade (json_schema mens_judgement)
  run      — the stage: plans, loads, runs the parts, writes eval.json / eval.md

eval.json — every number is a *metric row*, the one shape compare, the gate, the studio and
the ladder read:
    {"name": "arc_easy/acc", "group": "benchmark" | "in_domain" | "collateral" | "judge",
     "task": "arc_easy", "metric": "acc", "spoke": null, "higher_is_better": true,
     "n": 100,                                    # items (the unit resampled)
     "base":  {"value": 0.51, "ci": [0.41, 0.61], "n": 100, "method": "bootstrap"},
     "tuned": {"value": 0.55, "ci": [0.45, 0.65], "n": 100, …},   # absent: not evaluated
     "delta": {"value": 0.04, "ci": [-0.01, 0.09], …},  # tuned − base, paired
     "gain":  {"value": 0.04, "ci": [-0.01, 0.09], …},  # delta signed so that > 0 is better
                                                      # (loss: the share of base loss removed)
     "version": "1.0"}                            # the task's version (lm-eval) or null
Every interval carries its n and method ("bootstrap"; "exact" below 20 items, where a gain also
carries "p", the exact one-sided p-value of no gain, and "ci" is null below 6 items; null: no
interval, as for lm-eval aggregates that are not per-document means).
"""
