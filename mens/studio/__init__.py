"""The studio (issue #16): a local web app over the ladder, the AFK queue, recipes and the live
plan, jobs with live telemetry, data curation, gate receipts and serving — one page
(static/, no CDN) over an API (mens.studio.app) behind a guard (mens.studio.guard: Host /
Origin / token / body size). No second source of truth: the planner runs in process, training,
gating, the queue and the server run as `python -m mens…` children (mens.studio.procs,
mens.studio.serving), and every panel reads the run dirs those commands write.

    mens studio                          # http://127.0.0.1:8090/
    python -m mens.studio studio.port=0 studio.runs=outputs
"""
