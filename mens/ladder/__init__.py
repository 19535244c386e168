"""The ladder (issue #16): every rung × spoke cell and its state, derived from run directories
and plans — nothing stored twice. Torch-free (planning only).

For other stages (the AFK queue, the studio) — plain functions:

    from mens.ladder.state import ladder, cell_state, runs_by_cell, STATES
    result = ladder(cfg)                  # cfg: a composed mens config (hw, lane, ladder.runs …)
    for cell in result["cells"]:          # {rung, spoke, state, why, run, plan_fits,
        ...                               #  planned_peak_bytes, measured_peak_bytes, stale, gate …}
    todo = [c for c in result["cells"] if c["state"] in ("TRAIN_NOT_RUN", "STALE",
                                                         "BASE_SNAPSHOT_ABSENT") and c["plan_fits"]]

`mens ladder` / `python -m mens.ladder` prints the matrix and writes `ladder.json` in its run dir.
"""
