"""Release gates (issue #16): `mens gate run=DIR` measures a trained run before/after on its own
spoke and for collateral damage on every other spoke, and leaves a `gate.json` receipt in the run
dir. Only a run whose receipt passes — and still matches its adapter's bytes — may be promoted
to champion in `mens.serve`.

For other stages (the AFK queue, the studio) — plain functions, no Hydra needed:

    from mens.run.receipt import promotable, read_receipt, artifact_sha256
    from mens.data.corpus import corpus_lock    # the spoke corpus by content
    ok, why = promotable(run_dir)          # (True, "...") or (False, the reason)  — torch-free
    receipt = read_receipt(run_dir)         # gate.json as a dict (None: never gated)

    from mens.gate.run import gate_run      # imports torch when called
    receipt = gate_run(run_dir, cfg.gate)   # measures, writes gate.json atomically, returns it
"""
