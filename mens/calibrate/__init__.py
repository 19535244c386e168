"""Calibrate stage. In: shapes to measure (recipes `calib_*`). Out: calibration.json records
of real peaks (measure.py, through train's RunHooks), fitted contract cells (fit.py, records.py)
and a report against rules of thumb (report.py, rules.py)."""
