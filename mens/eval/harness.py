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
     "groups": {"mmlu": {"version": …, "metrics": {"acc": {"value", "stderr", …}}}}}
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
        collect(res, {t.task_name: t for t in _leaf_tasks(objs)}, on, why, out)
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


def collect(res: dict, tasks: dict, chat_on: bool, why: dict, out: dict) -> None:
    """Fold one simple_evaluate result into `out` (tasks: leaf name → lm-eval Task)."""
    samples = res.get("samples", {})
    for name, result in res["results"].items():
        version = res["versions"].get(name)
        version = None if version is None else str(version)
        hib = res.get("higher_is_better", {}).get(name, {})
        if name not in tasks:      # a group: lm-eval's aggregate of its subtasks
            out["groups"][name] = {"version": version, "metrics": {
                key: {"metric": m, "filter": f, "value": _num(result[f"{m},{f}"]),
                      "stderr": _num(result.get(f"{m}_stderr,{f}")),
                      "higher_is_better": hib.get(m)}
                for key, m, f in _metric_keys(result)}}
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
NO_CI = ("none: lm-eval's aggregate is not a mean of per-document values (its own stderr is "
         "kept; no interval is computed here)")


def _row(task: str, key: str, m: dict, version, n) -> dict:
    return {"name": f"{task}/{key}", "group": "benchmark", "task": task, "metric": m["metric"],
            "filter": m.get("filter", "none"), "spoke": None,
            "higher_is_better": m.get("higher_is_better"), "n": n, "version": version}


def _per_doc_row(row, b, t, hib: bool, eval_cfg) -> dict:
    """Intervals from per-document values: paired when both models ran (aligned by doc_id)."""
    from mens.eval.stats import interval, paired

    kw = {"confidence": float(eval_cfg.confidence), "reps": int(eval_cfg.bootstrap), "seed": int(eval_cfg.seed)}
    if b is not None and t is not None:
        docs = sorted(set(b) & set(t), key=int)
        if len(docs) != len(b) or len(docs) != len(t):
            print(f"mens eval: {row['name']}: base and tuned scored different documents "
                  f"({len(b)} vs {len(t)}); the {len(docs)} both scored are compared")
        p = paired([b[d] for d in docs], [t[d] for d in docs], higher_is_better=hib, **kw)
        return {**row, **p, "ci_method": PAIRED}
    side, vals = ("base", b) if b is not None else ("tuned", t)
    return {**row, "n": len(vals), side: interval(list(vals.values()), **kw), "ci_method": SINGLE}


def _aggregate_row(row, b, t, hib: bool) -> dict:
    """lm-eval's aggregate only (perplexity, corpus-level F1/BLEU, groups): value and stderr."""
    out = {**row, "ci_method": NO_CI}
    for side, m in (("base", b), ("tuned", t)):
        if m is not None:
            out[side] = {"value": m["value"], "ci": None, "stderr": m.get("stderr")}
    if b is not None and t is not None and None not in (b["value"], t["value"]):
        d = t["value"] - b["value"]
        out["delta"] = {"value": d, "ci": None}
        out["gain"] = {"value": d if hib else -d, "ci": None}
    return out


def benchmark_rows(base: dict | None, tuned: dict | None, eval_cfg) -> list[dict]:
    """eval.json metric rows (group "benchmark") from run_tasks results of base and/or tuned.
    Metrics averaged over documents (acc, acc_norm, exact_match, …) get bootstrap intervals —
    paired over documents aligned by doc_id when both models ran; other aggregates (perplexity,
    corpus F1, group scores) are listed with lm-eval's own stderr and no interval ("ci_method")."""
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
                hib = m.get("higher_is_better")
                hib = True if hib is None else bool(hib)
                row = {**_row(name, key, m, any_task.get("version"), any_task.get("n")),
                       "higher_is_better": hib}
                docs = [x["per_doc"] if x and x.get("aggregation") == "mean" else None
                        for x in (b, t)]
                if all(x is None or d is not None for x, d in zip((b, t), docs)):
                    rows.append(_per_doc_row(row, docs[0], docs[1], hib, eval_cfg))
                else:
                    rows.append(_aggregate_row(row, b, t, hib))
    return rows
