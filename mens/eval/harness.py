"""Standard benchmarks through lm-evaluation-harness, on the model mens already loaded.

The caller's model (a transformers model, or a PeftModel with its adapter active or disabled —
no merge, no second copy) is wrapped in lm-eval's own `HFLM` and scored by lm-eval's own
`simple_evaluate` with `log_samples=True`: the aggregates are lm-eval's, and the per-document
values let base and tuned be compared item by item (mens.eval.stats.paired).

Chat template: `auto` applies the tokenizer's chat template to the tasks whose output_type is
generate_until (an instruction-tuned prompt format for free-form answers) and not to
log-likelihood tasks (they score the task's own raw continuation); True / False force it for
every task. lm-eval takes one setting per evaluation, so the tasks are evaluated in (at most)
two calls, one per setting. What was chosen is printed and kept per task.

A result (JSON-serialisable; per-doc values keyed by str(doc_id) so a JSON round trip keeps it):
    {"label": "tuned", "lm_eval": "0.4.13", "limit": …, "num_fewshot": …, "seed": 0,
     "tasks": {"arc_easy": {"version": "1.0", "output_type": "multiple_choice", "n": 100,
                            "n_shot": 0, "chat_template": False, "chat_template_why": "…",
                            "metrics": {"acc": {"metric": "acc", "filter": "none",
                                                "value": .5, "stderr": .05,
                                                "higher_is_better": True, "aggregation": "mean",
                                                "per_doc": {"0": 1.0, …} | None}},
                            "responses": {"none": {"0": [[-3.2, False], …] | "text"}}}},
     "groups": {"mmlu": {"version": …, "metrics": {"acc": {"value", "stderr", …}},
                         "subtasks": ["mmlu_anatomy", …], "weight_by_size": {"acc": True}}}}

A group's row is resampled over its subtasks' documents (each keyed `<subtask>/<doc_id>`): its
value is lm-eval's aggregate — the size-weighted mean of the subtasks' means is the mean over all
their documents; weight_by_size=false weights each document by 1/(its subtask's size) — so a
group guard (gate.guard_tasks=[mmlu]) has an interval and can fail. A metric with no
per-document mean (perplexity, corpus F1/BLEU, MCC) keeps lm-eval's value and stderr and no
interval: the gate cannot judge it, and says so. A metric with no direction (higher_is_better
missing and unknown to lm-eval's registry) is a ConfigError naming it: guessing "higher" would
read a regression as a gain.
"""
from __future__ import annotations

import math

from mens.errors import ConfigError
from mens.eval.tasks import load_tasks

AUTO = "auto"
GEN = "generate_until"


def _limit(limit):
    """lm-eval: an int is a count of documents, a float below 1 a fraction (Hydra gives 5.0)."""
    if limit is None:
        return None
    return limit if float(limit) < 1 else int(limit)


def _mode(chat_template, eval_cfg):
    mode = chat_template if chat_template is not None else getattr(eval_cfg, "chat_template", AUTO)
    if mode in (None, AUTO):
        return AUTO
    if isinstance(mode, bool):
        return mode
    raise ConfigError(f"eval.chat_template={mode!r}: use auto, true or false.",
                      key="eval.chat_template")


def _leaf_tasks(objs) -> list:
    from lm_eval.api.group import Group

    out = []
    for o in objs:
        out += o.get_all_tasks() if isinstance(o, Group) else [o]
    return out


def _groups(objs) -> dict:
    """{name: lm-eval Group} of these loaded objects, nested groups (mmlu_stem …) included."""
    from lm_eval.api.group import Group

    out = {}
    for o in objs:
        if isinstance(o, Group):
            out.update({g.name: g for g in (o, *o.get_all_groups())})
    return out


def _agg(a, field: str, default):
    """A field of a group's aggregate_metric_list entry (an AggMetricConfig, or a dict)."""
    return getattr(a, field, default) if not isinstance(a, dict) else a.get(field, default)


def check_directions(loaded: dict) -> None:
    """Every metric of every requested task has a direction (lm-eval's higher_is_better: the
    task's metric_list, else its registry). Called before any weights load; a metric lacking
    one is a ConfigError naming it — mens does not guess that higher is better."""
    for name, objs in loaded.items():
        for t in _leaf_tasks(objs):
            for metric, hib in (t.higher_is_better() or {}).items():
                if hib is None:
                    raise _no_direction(t.task_name, metric)


def _no_direction(task: str, metric: str) -> ConfigError:
    return ConfigError(
        f"eval.tasks: metric `{metric}` of lm-eval task `{task}` has no direction (no "
        f"`higher_is_better` in its metric_list, and lm-eval's registry does not know "
        f"`{metric}`): add `higher_is_better: true` (or false) to that metric in the task's "
        f"YAML. mens will not guess — a regression would read as a gain.", key="eval.tasks")


def chat_choice(objs, mode, has_template: bool) -> tuple[bool, str]:
    """(apply the chat template?, why) for one requested name's tasks."""
    if mode is True:
        return True, "eval.chat_template=true"
    if mode is False:
        return False, "eval.chat_template=false"
    kinds = {t.get_config("output_type") for t in _leaf_tasks(objs)}
    if kinds != {GEN}:
        return False, f"auto: output_type {', '.join(sorted(kinds))}"
    if not has_template:
        return False, "auto: generate_until, but the tokenizer has no chat template"
    return True, "auto: generate_until and the tokenizer has a chat template"


def run_tasks(model, tokenizer, eval_cfg, *, label: str, batch_size: int, max_length: int,
              chat_template: bool | None = None) -> dict:
    """lm-eval's numbers for eval_cfg.tasks on this model (see the module docstring for the shape)."""
    from importlib.metadata import version

    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM

    names = list(eval_cfg.tasks)
    tm, loaded = load_tasks(names, eval_cfg.include_path)
    check_directions(loaded)
    mode = _mode(chat_template, eval_cfg)
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if mode is True and not has_template:
        raise ConfigError("eval.chat_template=true, but the tokenizer has none: set "
                          "eval.chat_template=auto (or false).", key="eval.chat_template")
    chat = {n: chat_choice(loaded[n], mode, has_template) for n in names}
    for n, (on, why) in chat.items():
        print(f"mens eval ({label}): {n}: chat template {'applied' if on else 'not applied'} "
              f"({why})")
    # an int, or lm-eval's own "auto" / "auto:N" (it then probes the largest that fits)
    batch_size = batch_size if isinstance(batch_size, str) else int(batch_size)
    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size,
              max_length=int(max_length))
    out = {"label": label, "lm_eval": version("lm_eval"), "limit": eval_cfg.limit,
           "num_fewshot": eval_cfg.num_fewshot, "seed": int(eval_cfg.seed), "batch_size": batch_size,
           "max_length": int(max_length), "tasks": {}, "groups": {}}
    for on in (False, True):
        picked = [n for n in names if chat[n][0] == on]
        if not picked:
            continue
        objs = [o for n in picked for o in loaded[n]]
        res = simple_evaluate(
            model=lm, tasks=objs, task_manager=tm, num_fewshot=eval_cfg.num_fewshot,
            limit=_limit(eval_cfg.limit), log_samples=True, bootstrap_iters=int(eval_cfg.bootstrap),
            apply_chat_template=on, fewshot_as_multiturn=on, random_seed=int(eval_cfg.seed),
            numpy_random_seed=int(eval_cfg.seed), torch_random_seed=int(eval_cfg.seed),
            fewshot_random_seed=int(eval_cfg.seed))
        why = {t.task_name: chat[n][1] for n in picked for t in _leaf_tasks(loaded[n])}
        collect(res, {t.task_name: t for t in _leaf_tasks(objs)}, on, why, out, _groups(objs))
    return out


def _num(x):
    """lm-eval's numbers as plain floats; its 'N/A' stderr, NaN (one document) → None: JSON."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _plain(x):
    """lm-eval's responses (tuples of (log-likelihood, is_greedy), strings) as JSON values."""
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, (str, bool, int)) or x is None:
        return x
    return _num(x)


def _metric_keys(result: dict):
    """(key, metric, filter) of lm-eval's "acc,none"-style result keys (stderr keys aside)."""
    for k in result:
        metric, sep, filt = k.partition(",")
        if sep and not metric.endswith("_stderr"):
            yield (metric if filt == "none" else k), metric, filt


def collect(res: dict, tasks: dict, chat_on: bool, why: dict, out: dict,
            groups: dict | None = None) -> None:
    """Fold one simple_evaluate result into `out` (tasks: leaf name → lm-eval Task; groups:
    name → lm-eval Group, whose leaves and weighting let a group row be resampled)."""
    samples = res.get("samples", {})
    for name, result in res["results"].items():
        version = res["versions"].get(name)
        version = None if version is None else str(version)
        hib = res.get("higher_is_better", {}).get(name, {})
        if name not in tasks:      # a group: lm-eval's aggregate of its subtasks
            g = (groups or {}).get(name)
            out["groups"][name] = {"version": version, "metrics": {
                key: {"metric": m, "filter": f, "value": _num(result[f"{m},{f}"]),
                      "stderr": _num(result.get(f"{m}_stderr,{f}")),
                      "higher_is_better": hib.get(m)}
                for key, m, f in _metric_keys(result)},
                "subtasks": [t.task_name for t in g.get_all_tasks()] if g else None,
                "weight_by_size": {_agg(a, "metric", None): bool(_agg(a, "weight_by_size", True))
                                   for a in (g.aggregate_metric_list or [])} if g else {}}
            continue
        aggs = {m: getattr(fn, "__name__", str(fn)) for m, fn in tasks[name].aggregation().items()}
        metrics = {}
        for key, m, f in _metric_keys(result):
            per_doc = {}
            for s in samples.get(name, []):
                if s.get("filter", "none") == f and m in s:
                    per_doc[str(s["doc_id"])] = s[m]
            numeric = per_doc and all(isinstance(v, (int, float)) for v in per_doc.values())
            metrics[key] = {
                "metric": m, "filter": f, "value": _num(result[f"{m},{f}"]),
                "stderr": _num(result.get(f"{m}_stderr,{f}")), "higher_is_better": hib.get(m),
                "aggregation": aggs.get(m),
                "per_doc": {d: float(v) for d, v in per_doc.items()} if numeric else None}
        responses: dict = {}     # what the model said: log-likelihoods per choice, or text
        for s in samples.get(name, []):
            responses.setdefault(s.get("filter", "none"), {})[str(s["doc_id"])] = \
                _plain(s.get("filtered_resps"))
        n = res.get("n-samples", {}).get(name, {})
        out["tasks"][name] = {
            "version": version, "output_type": tasks[name].get_config("output_type"),
            "n": n.get("effective"), "n_shot": res.get("n-shot", {}).get(name),
            "chat_template": chat_on, "chat_template_why": why.get(name), "metrics": metrics,
            "responses": responses}


# --- eval.json rows ------------------------------------------------------------------------------
PAIRED = "paired bootstrap over documents"
SINGLE = "bootstrap over documents"
CLOPPER = "Clopper-Pearson over documents (0/1 scores)"
EXACT = "exact sign-flip test over documents (fewer than 20)"
MCNEMAR = "McNemar's exact test over the documents that differ (0/1 scores)"
NO_CI = ("none: lm-eval's aggregate is not a mean of per-document values (its own stderr is "
         "kept; no interval is computed here, so the gate cannot judge it)")


def _row(task: str, key: str, m: dict, version, n) -> dict:
    return {"name": f"{task}/{key}", "group": "benchmark", "task": task, "metric": m["metric"],
            "filter": m.get("filter", "none"), "spoke": None,
            "higher_is_better": m.get("higher_is_better"), "n": n, "version": version}


def _doc_order(d: str):
    """Documents in order: "12" by number; a group's "<subtask>/12" by subtask, then number."""
    task, _, doc = d.rpartition("/")
    return task, int(doc)


def _per_doc_row(row, b, t, hib: bool, eval_cfg, weights=None) -> dict:
    """Intervals from per-document values: paired when both models ran (aligned by doc_id).
    weights: per document (a group of weight_by_size=false), values then pre-multiplied."""
    from mens.eval.stats import binary, interval, paired

    kw = {"confidence": float(eval_cfg.confidence), "reps": int(eval_cfg.bootstrap), "seed": int(eval_cfg.seed)}
    if b is not None and t is not None:
        docs = sorted(set(b) & set(t), key=_doc_order)
        if len(docs) != len(b) or len(docs) != len(t):
            print(f"mens eval: {row['name']}: base and tuned scored different documents "
                  f"({len(b)} vs {len(t)}); the {len(docs)} both scored are compared")
        w = None if weights is None else [weights[d] for d in docs]
        vb, vt = [b[d] for d in docs], [t[d] for d in docs]
        p = paired(vb, vt, weights=w, higher_is_better=hib, **kw)
        how = PAIRED if p["gain"]["method"] == "bootstrap" else \
            MCNEMAR if w is None and binary(vb, vt) else EXACT
        return {**row, **p, "ci_method": how}
    side, vals = ("base", b) if b is not None else ("tuned", t)
    docs = sorted(vals, key=_doc_order)
    w = None if weights is None else [weights[d] for d in docs]
    one = interval([vals[d] for d in docs], w, **kw)
    return {**row, "n": len(vals), side: one,
            "ci_method": CLOPPER if one["method"] == "exact" else SINGLE}


def _aggregate_row(row, b, t, hib: bool) -> dict:
    """lm-eval's aggregate only (perplexity, corpus-level F1/BLEU): value and stderr."""
    out = {**row, "ci_method": NO_CI}
    n = row.get("n")
    for side, m in (("base", b), ("tuned", t)):
        if m is not None:
            out[side] = {"value": m["value"], "ci": None, "n": n, "method": None,
                         "stderr": m.get("stderr")}
    if b is not None and t is not None and None not in (b["value"], t["value"]):
        d = t["value"] - b["value"]
        out["delta"] = {"value": d, "ci": None, "n": n, "method": None}
        out["gain"] = {"value": d if hib else -d, "ci": None, "n": n, "method": None}
    return out


def _mean_docs(m: dict | None) -> dict | None:
    """A metric's per-document values when lm-eval's aggregate is their mean, else None."""
    return m["per_doc"] if m and m.get("aggregation") == "mean" else None


def _group_docs(run: dict, group: str, key: str, metric: str):
    """(values, weights) of a group's metric over its subtasks' documents, keyed
    `<subtask>/<doc_id>`; weights None when lm-eval weights by size (each document counts
    once). None when a subtask lacks per-document means (the group has no interval)."""
    g = run["groups"][group]
    if not g.get("subtasks"):
        return None
    by_size = (g.get("weight_by_size") or {}).get(metric, True)
    vals, wts = {}, {}
    for leaf in g["subtasks"]:
        docs = _mean_docs(run["tasks"].get(leaf, {}).get("metrics", {}).get(key))
        if not docs:
            return None
        w = 1.0 if by_size else 1.0 / len(docs)   # a ratio of sums: Σ(v·w) / Σw
        vals.update({f"{leaf}/{d}": v * w for d, v in docs.items()})
        wts.update({f"{leaf}/{d}": w for d in docs})
    return vals, (None if by_size else wts)


def _direction(name: str, key: str, m: dict) -> bool:
    hib = m.get("higher_is_better")
    if hib is None:
        raise _no_direction(name, key)
    return bool(hib)


def benchmark_rows(base: dict | None, tuned: dict | None, eval_cfg) -> list[dict]:
    """eval.json metric rows (group "benchmark") from run_tasks results of base and/or tuned.
    Metrics averaged over documents (acc, acc_norm, exact_match, …) get intervals — paired over
    documents aligned by doc_id when both models ran; a group's over its subtasks' documents;
    other aggregates (perplexity, corpus F1) are listed with lm-eval's own stderr and no
    interval ("ci_method")."""
    runs = {"base": base or {}, "tuned": tuned or {}}
    rows = []
    for kind in ("tasks", "groups"):
        names = list(dict.fromkeys([*runs["base"].get(kind, {}), *runs["tuned"].get(kind, {})]))
        for name in names:
            b_task, t_task = (runs[s].get(kind, {}).get(name) for s in ("base", "tuned"))
            any_task = b_task or t_task
            for key in dict.fromkeys([*(b_task or {}).get("metrics", {}),
                                      *(t_task or {}).get("metrics", {})]):
                b, t = ((x or {}).get("metrics", {}).get(key) for x in (b_task, t_task))
                m = b or t
                hib = _direction(name, key, m)
                if kind == "tasks":
                    docs = [_mean_docs(x) if x else None for x in (b, t)]
                    weights, n = None, any_task.get("n")
                else:
                    found = [_group_docs(runs[s], name, key, m["metric"]) if x else None
                             for s, x in (("base", b), ("tuned", t))]
                    docs = [f[0] if f else None for f in found]
                    weights = next((f[1] for f in found if f), None)
                    n = _group_n(runs, any_task)
                row = {**_row(name, key, m, any_task.get("version"), n), "higher_is_better": hib}
                if all(x is None or d is not None for x, d in zip((b, t), docs)):
                    rows.append(_per_doc_row(row, docs[0], docs[1], hib, eval_cfg, weights))
                else:
                    rows.append(_aggregate_row(row, b, t, hib))
    return rows


def _group_n(runs: dict, group: dict) -> int | None:
    """A group's documents: the sum over its subtasks (as scored by either model)."""
    leaves = group.get("subtasks") or []
    ns = [next((r["tasks"][x].get("n") for r in runs.values() if x in r.get("tasks", {})), None)
          for x in leaves]
    return sum(ns) if leaves and None not in ns else None
