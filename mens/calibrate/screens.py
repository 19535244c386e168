"""The data-dependent screens of published evidence: rows whose reading, set beside other
readings, is judged not to be what the stated config needs.

Each looks at measured peaks, so none may be decided with a held-out source in view: the
external fit (mens.calibrate.external) runs them on the rows of every fold it fits, and still
predicts every row of the source it holds out — the screened rows too, so the report carries
both the screened and the all-rows errors. Their thresholds are fixed rules, the same in every
fold (not tuned on the rows they screen):

  not_binding   one source's same config on two cards: the larger card's reading (> 1.1× the
                smallest) is what the caching allocator kept with memory to spare
  load_reading  a peak hardly above the source's own load-time reading (≥ 95 % of it): the pool
                reserved to load the model, not what the step needs
  inconsistent  a source's series of one model whose rows keep outside 0.33–2× the activations
                their stated config keeps, where activations are ≥ 15 % of the peaks: the config
                does not describe what ran

Every screen is per source (it compares a source's rows with each other), so a fold decides
its training rows exactly as a fit over those sources alone would.
"""
from __future__ import annotations

import json

import numpy as np

ACT_RANGE = (0.33, 2.0)   # a source's own activation coefficient outside this: inconsistent
MIN_ACT_SHARE = 0.15      # ...judged only where activations are this share of its peaks
LARGER_CARD = 1.1         # a reading above this × the smallest of its config: not binding
LOAD_SHARE = 0.95         # a peak below load_peak / this: the load-time pool


def not_binding(recs: list[dict]) -> dict[str, str]:
    """{id: why} of readings on a larger card than the smallest reading of the same config in
    the same source (torchtune's Llama-3.1-8B LoRA: 16.2 GiB on a 24 GB 4090, 30.3 GiB on a
    48 GB A6000): the smallest is the requirement's evidence."""
    def key(r):
        return json.dumps([r["source"], r["arch"], r["lane"], r["seq_len"], r["micro_batch"],
                           r["checkpointing"], r["packing"], r["paths"]], sort_keys=True)
    groups: dict[str, list[dict]] = {}
    for r in recs:
        groups.setdefault(key(r), []).append(r)
    out = {}
    for rs in groups.values():
        least = min(rs, key=lambda r: r["measured_peak_bytes"])
        for r in rs:
            if (r is not least and r["gpu"] != least["gpu"]
                    and r["measured_peak_bytes"] > LARGER_CARD * least["measured_peak_bytes"]):
                out[r["id"]] = (f"the same config measured "
                                f"{least['measured_peak_bytes'] / 2**30:.1f} GiB on {least['gpu']} "
                                f"in this source: this card's reading is what its allocator kept "
                                f"with memory to spare (its throughput still counts)")
    return out


def load_reading(recs: list[dict]) -> dict[str, str]:
    """{id: why} of peaks hardly above the reading the source took while loading."""
    out = {}
    for r in recs:
        load = r.get("load_peak_bytes")
        if load is not None and r["measured_peak_bytes"] <= load / LOAD_SHARE:
            out[r["id"]] = (f"a reading ({r['measured_peak_bytes'] / 2**30:.2f} GiB) hardly above "
                            f"the one taken while loading ({load / 2**30:.2f} GiB): the pool "
                            f"reserved to load the model, not what the step needs")
    return out


def inconsistent(recs: list[dict], cols: list[tuple]) -> dict[str, str]:
    """{id: why} for a source's series of one model whose rows, taken together, keep
    activations outside ACT_RANGE of what their stated configs keep (params and overhead as
    counted): ms-swift's checkpointed Yi-6B rows grow by ~3 MB a token, what the model counts
    without checkpointing. Such rows would teach every other source's cells a gap that is
    theirs alone."""
    out = {}
    for key in sorted({(r["source"], r["rung"]["name"]) for r in recs}):
        idx = [i for i, r in enumerate(recs) if (r["source"], r["rung"]["name"]) == key]
        y = np.array([recs[i]["measured_peak_bytes"] for i in idx], float)
        p, a, o = (np.array([cols[i][j] for i in idx], float) for j in range(3))
        w = 1.0 / y
        if float(np.mean(a / (p + a + o))) < MIN_ACT_SHARE:   # too little to judge by
            continue
        coef = float((w * (y - p - o)) @ (w * a) / ((w * a) @ (w * a)))
        if not ACT_RANGE[0] <= coef <= ACT_RANGE[1]:
            why = (f"{key[1]} rows of {key[0]} keep {coef:.2f}× the activations their stated "
                   f"configs keep (outside {ACT_RANGE[0]:g}–{ACT_RANGE[1]:g}×): the configs do "
                   f"not describe what ran (their throughput still counts)")
            out.update({recs[i]["id"]: why for i in idx})
    return out


def screen(recs: list[dict], cols: list[tuple]) -> dict[str, tuple[str, str]]:
    """{id: (screen, why)} over these rows only — what a fit on them leaves out."""
    out: dict[str, tuple[str, str]] = {}
    for name, found in (("not_binding", not_binding(recs)), ("load_reading", load_reading(recs))):
        for i, why in found.items():
            out.setdefault(i, (name, why))
    # a series is judged on the readings the two screens above leave
    rest = [(r, c) for r, c in zip(recs, cols) if r["id"] not in out]
    for i, why in inconsistent([r for r, _ in rest], [c for _, c in rest]).items():
        out[i] = ("inconsistent", why)
    return out
