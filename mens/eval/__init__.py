"""`mens eval` (issue #27): did fine-tuning help, and what did it cost? One stage, writing
`eval.json` + `eval.md` into the run dir (or `outputs/<date>/<time>_eval/` for a base alone),
a wandb run of job_type `eval`, and a telemetry-style record.

Modules:
  stats    — intervals over items (paired for base vs tuned: 0/1 scores exact at every n —
             McNemar, Clopper-Pearson; others bootstrap, exact sign-flip below 20 items),
             verdicts with floors (eval.min_items; the items that differ), the unbiased pass@k
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
Every interval carries its n and method ("exact" for 0/1 scores at every n — Clopper-Pearson
for one model, McNemar's test for the gain — and for other scores below 20 items, where "ci" is
null below 6 items; "bootstrap" else; null: no interval, as for lm-eval aggregates that are not
per-document means). An exact gain also carries "p", the exact one-sided p-value of no gain;
every paired gain carries "discordant", the items whose scores differ (fewer than 6 at 95 %:
too few to judge, mens.eval.stats.too_few_differ).
"""
