"""The dataset card (README.md) of `mens data push`: YAML front matter the Hub's viewer and
`datasets.load_dataset` read (`configs:` with the data files of every split), then what a reader
of a synthetic dataset wants to know — what it is, who made it (per teacher and model: rows,
calls, tokens, cost), how often the oracle passed it, what repair and curation did, and the
teachers' terms of use. Rendered from the dataset dir alone; nothing in it changes between two
pushes of the same data (no dates but the records' own), so a re-push uploads nothing."""
from __future__ import annotations

from collections import Counter
from urllib.parse import urlsplit

from huggingface_hub import DatasetCard, DatasetCardData

SIZES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
         (1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M"))
LEAVES_SHOWN = 40
TERMS = "TERMS.md"


def size_category(n: int) -> str:
    return next((name for limit, name in SIZES if n < limit), "n>1M")


def _cell(v) -> str:
    return "–" if v is None else str(v).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows])


def _pct(a: int, b: int) -> str:
    return f"{100 * a / b:.0f} % ({a}/{b})" if b else "–"


def _teacher(r: dict) -> tuple[str, str]:
    t = r.get("teacher")
    return ((t.get("name") or "?", t.get("model") or "?") if isinstance(t, dict)
            else (str(t or "?"), "?"))


def _topic(r: dict) -> str:
    return " / ".join(str(x) for x in r.get("topic") or []) or str(r.get("leaf") or "(none)")


def card_data(repo: str, spoke: str, configs: dict, rows: int) -> DatasetCardData:
    entries = []
    for name, splits in configs.items():
        files = [{"split": s, "path": f"{'data' if name == 'default' else name}/{s}-*.parquet"}
                 for s, n in splits.items() if n]
        entry = {"config_name": name, "data_files": files}
        entries.append({**entry, "default": True} if name == "default" else entry)
    return DatasetCardData(
        language=["en"], license="other", task_categories=["text-generation"],
        tags=["mens", "synthetic", spoke], size_categories=size_category(rows),
        pretty_name=f"{spoke} (mens synthetic, {repo.split('/')[-1]})",
        source_datasets=["original"], annotations_creators=["machine-generated"],
        language_creators=["machine-generated"], configs=entries,
        # no license mens could choose: the teachers' terms decide (TERMS.md, the card's end)
        license_name="teacher-terms-of-use", license_link=TERMS)


def render_card(*, repo, tree, stats, records, train, held, pairs, quarantine, configs,
                eval_from, notes) -> str:
    spoke = tree.spoke if tree is not None else repo.split("/")[-1]
    data = card_data(repo, spoke, configs, len(records))
    parts = [f"# {data.pretty_name}", _intro(repo, spoke, tree, records, train, held, pairs,
                                             quarantine, configs, eval_from, notes),
             _tree_section(tree), _provenance(stats, records, pairs, quarantine),
             _oracle(records, quarantine), _repairs(records, pairs), _curation(records, stats),
             _usage(repo), "## Terms of use\n\n" + terms(stats, records, pairs)]
    text = f"---\n{data.to_yaml()}\n---\n\n" + "\n\n".join(p for p in parts if p) + "\n"
    return str(DatasetCard(text))


def _intro(repo, spoke, tree, records, train, held, pairs, quarantine, configs, eval_from,
           notes) -> str:
    domain = tree.root.description if tree is not None and tree.root.description else spoke
    rows = []
    for name, splits in configs.items():
        folder = "data" if name == "default" else name
        rows += [[f"`{name}`", s, n, f"`{folder}/{s}-00000-of-00001.parquet`"]
                 for s, n in splits.items() if n]
    text = [f"A synthetic dataset for the mens spoke **{spoke}** — {domain}. It was made by "
            f"`mens data synth`: a teacher model wrote samples for every leaf of a topic tree, "
            f"each candidate was checked by the spoke's deterministic oracle, failures were "
            f"sent back for repair, and `mens data curate` cleaned and rated the result.",
            "", _table(["config", "split", "rows", "file"], rows), "",
            f"**eval split**: {eval_from}. Rows keep the OpenAI-chat `messages` (train on them "
            f"as they are) and the provenance of each record as columns: `teacher`, `model`, "
            f"`topic`, `leaf`, `verdict` (passed / repaired / unverified), `oracle_*`, "
            f"`repaired`, `repair_turns`, `rating`, `tags`. `pairs` has chosen (the repair) / "
            f"rejected (the first failure) answers for DPO; `quarantine` what never passed or "
            f"was removed by cleaning, with the reason. `tree.yaml` is the topic tree and "
            f"`stats.json` the teacher ledger."]
    notes = [n for n in notes if not n.startswith("eval split")]    # said just above
    if notes:
        text += ["", *[f"> Note: {n}." for n in notes]]
    return "\n".join(text)


def _tree_section(tree) -> str:
    if tree is None:
        return "## Topic tree\n\nNo tree.yaml came with this dataset."
    leaves = tree.leaves()
    nodes = list(tree.nodes())
    depth = max(len(path) for _, path in nodes) - 1
    rows = [[" / ".join(topic), n.verified, n.target] for n, topic in leaves[:LEAVES_SHOWN]]
    more = (f"\n\n…and {len(leaves) - LEAVES_SHOWN} more leaves (tree.yaml has them all)."
            if len(leaves) > LEAVES_SHOWN else "")
    return (f"## Topic tree\n\n{len(nodes)} nodes, {len(leaves)} leaves, depth {depth}. "
            f"Verified: samples the oracle admitted at the leaf; target: samples wanted.\n\n"
            + _table(["leaf", "verified", "target"], rows) + more)


def _ledgers(stats: dict) -> list[tuple[str, str, dict]]:
    out = []
    for role, key in (("synthesis (last run)", "teacher"), ("topic tree", "tree_teacher")):
        for name, t in ((stats.get(key) or {}).get("teachers") or {}).items():
            out.append((role, name, t))
    return out


def _provenance(stats, records, pairs, quarantine) -> str:
    per = Counter()
    for kind, rows in (("records", records), ("pairs", pairs), ("quarantine", quarantine)):
        for r in rows:
            per[(*_teacher(r), kind)] += 1
    who = sorted({(t, m) for t, m, _ in per})
    text = ["## Provenance", "",
            _table(["teacher", "model", "records", "pairs", "quarantined"],
                   [[t, m, per[(t, m, "records")], per[(t, m, "pairs")],
                     per[(t, m, "quarantine")]] for t, m in who])]
    ledger = _ledgers(stats)
    if ledger:
        text += ["", "The teacher ledger (stats.json): calls, invalid replies, tokens and cost "
                 "(null: the teacher has no price).", "",
                 _table(["step", "teacher", "model", "calls", "invalid JSON",
                         "schema violations", "prompt tokens", "completion tokens", "cost USD"],
                        [[role, name, t.get("model"), t.get("calls"), t.get("invalid_json"),
                          t.get("schema_violations"), t.get("prompt_tokens"),
                          t.get("completion_tokens"), t.get("cost_usd")]
                         for role, name, t in ledger])]
    runs = stats.get("runs") or []
    if runs:
        tot = [r.get("teacher_totals") or {} for r in runs]
        costs = [t.get("cost_usd") for t in tot]
        cost = None if any(c is None for c in costs) else round(sum(costs), 6)
        priced = "unknown (a teacher without a price)" if cost is None else f"{cost} USD"
        text += ["", f"All {len(runs)} synthesis run(s): "
                 f"{sum(t.get('calls') or 0 for t in tot)} calls, "
                 f"{sum(t.get('prompt_tokens') or 0 for t in tot)} prompt + "
                 f"{sum(t.get('completion_tokens') or 0 for t in tot)} completion tokens, "
                 f"cost {priced}."]
    return "\n".join(text)


def _oracle(records, quarantine) -> str:
    c: dict[str, Counter] = {}
    checks = Counter(str((r.get("oracle") or {}).get("check")) for r in records if r.get("oracle"))
    for r in records:
        c.setdefault(_topic(r), Counter())[r.get("verdict") or "unknown"] += 1
    for q in quarantine:
        reason = str(q.get("reason") or "")
        key = ("failed" if reason.startswith("never passed") else
               "invalid" if reason.startswith("teacher output invalid") else "cleaned")
        c.setdefault(_topic(q), Counter())[key] += 1
        if key == "cleaned" and q.get("verdict"):   # passed the oracle before cleaning took it
            c[_topic(q)][q["verdict"]] += 1
    rows, total = [], Counter()
    for topic in sorted(c):
        k = c[topic]
        total.update(k)
        judged = k["passed"] + k["repaired"] + k["failed"]
        rows.append([topic, k["passed"], k["repaired"], k["failed"], k["unverified"],
                     k["invalid"], k["cleaned"], _pct(k["passed"] + k["repaired"], judged)])
    judged = total["passed"] + total["repaired"] + total["failed"]
    rows.append(["**all**", total["passed"], total["repaired"], total["failed"],
                 total["unverified"], total["invalid"], total["cleaned"],
                 _pct(total["passed"] + total["repaired"], judged)])
    return ("## Oracle\n\n"
            f"Every candidate was run through the oracle `{', '.join(sorted(checks)) or '?'}` "
            f"before it could become a record. First-try pass rate: "
            f"{_pct(total['passed'], judged)}; after repair: "
            f"{_pct(total['passed'] + total['repaired'], judged)}. Unverified: the oracle could "
            f"not run where the data was made (kept, counted). Invalid: teacher replies that "
            f"were not usable JSON. Cleaned: removed by near-duplicate or contamination checks."
            "\n\n" + _table(["topic", "passed", "repaired", "never passed", "unverified",
                             "invalid", "cleaned", "pass rate"], rows))


def _repairs(records, pairs) -> str:
    turns = Counter(r.get("repair_turns") for r in records if r.get("verdict") == "repaired")
    if not turns and not pairs:
        return "## Repairs\n\nNo candidate needed a repair."
    spread = ", ".join(f"{n} after {t} turn{'s' if t != 1 else ''}"
                       for t, n in sorted(turns.items(), key=lambda x: x[0] or 0))
    return (f"## Repairs\n\n{sum(turns.values())} records passed only after the teacher was "
            f"shown the oracle's diagnostics ({spread or 'none'}). Each gave a pair in the "
            f"`pairs` config ({len(pairs)}): chosen = the repair, rejected = the failed first "
            f"answer, with its diagnostics — `mens train lane=dpo` trains on them.")


def _curation(records, stats) -> str:
    ratings = Counter(r.get("rating") for r in records
                      if isinstance(r.get("rating"), (int, float)))
    tags = Counter(t for r in records for t in r.get("tags") or [])
    edited = sum(1 for r in records if r.get("edits"))
    lines = ["## Curation", ""]
    if ratings:
        n = sum(ratings.values())
        mean = sum(k * v for k, v in ratings.items()) / n
        lines.append(f"- Rated: {n} of {len(records)} records, mean {mean:.2f} ("
                     + ", ".join(f"{k:g}: {v}" for k, v in sorted(ratings.items())) + ").")
    else:
        lines.append(f"- Rated: none of {len(records)} records (`mens data curate rate`).")
    lines.append("- Tags: " + (", ".join(f"`{t}` {n}" for t, n in sorted(tags.items()))
                               or "none") + ".")
    lines.append(f"- Edited by hand: {edited} records (the original answer is kept in `edits`).")
    cl = stats.get("cleaned")
    if isinstance(cl, dict):
        lines.append(f"- Cleaned (last `clean`): {cl.get('near_duplicates', 0)} near-duplicates "
                     f"(Jaccard ≥ {cl.get('near_dup')} of word {cl.get('near_dup_n')}-grams) "
                     f"and "
                     f"{cl.get('contaminated', 0)} records contaminated by an eval split "
                     f"({cl.get('decontam_n')}-grams, threshold {cl.get('decontam_threshold')}) "
                     f"removed to quarantine.")
    return "\n".join(lines)


def _usage(repo: str) -> str:
    return ("## Use\n\n```python\nfrom datasets import load_dataset\n\n"
            f"sft = load_dataset(\"{repo}\")              # train / eval: messages + provenance\n"
            f"pairs = load_dataset(\"{repo}\", \"pairs\")    # chosen / rejected (DPO)\n```\n\n"
            f"With mens: `mens train data=hf data.name={repo} data.eval_path=eval`.")


def _hosts(stats: dict) -> dict[tuple[str, str], str]:
    out = {}
    for _, name, t in _ledgers(stats):
        host = urlsplit(t.get("base_url") or "").hostname or "?"
        local = host in ("127.0.0.1", "localhost", "::1") or host.startswith("192.168.")
        out[(name, t.get("model") or "?")] = "a local endpoint" if local else host
    return out


def terms(stats, records, pairs) -> str:
    """The terms-of-use reminder (the card's last section, and TERMS.md: `license_link`)."""
    hosts = _hosts(stats)
    made = sorted({_teacher(r) for rows in (records, pairs) for r in rows})
    names = [f"`{m}` (teacher `{t}`, via {hosts.get((t, m), 'an unrecorded endpoint')})"
             for t, m in made] or ["(no teacher recorded)"]
    return ("The answers in this dataset were generated by "
            + ", ".join(names) + ". Output of a provider's model is subject to that provider's "
            "terms of use and the model's license — some forbid using outputs to train models "
            "that compete with theirs, or require attribution. Read them before you train on, "
            "share or sell this data. The card's `license: other` stands for those terms "
            f"({TERMS}): replace it with the license that fits.")
