"""`mens data synth spoke=… synth.per_leaf=8 synth.strategy=…`: leaf-conditioned synthesis.

Per leaf of DIR/tree.yaml the teacher is asked (mens_samples) for `synth.per_leaf` samples
under the spoke's one system prompt; every candidate is judged by the spoke's deterministic
oracle (mens.synth.oracle, `spoke.admission.check`):
  * passes on turn 1 (or the oracle cannot run here: unverified, counted) → an SFT record;
  * fails → up to `synth.repair_turns` repair turns (mens_repair), each request carrying the
    failed response and the oracle's exact diagnostics; a repair that passes → an SFT record AND
    a chosen/rejected pair (chosen = the repair, rejected = the first failure, with its
    diagnostics) for lane=dpo;
  * never passes → quarantine.jsonl, with every attempt's diagnostics.
Bad teacher output (invalid JSON, schema violations) is counted in the ledger and quarantined,
never fatal. Strategies: zero_shot; few_shot_seed (k examples: the node's seeds and the spoke's
shipped corpus); cot_distill (reasoning asked for in <think>…</think>, kept out of the trained
answer unless synth.keep_reasoning=true — then it is the message's `reasoning_content`);
oracle_repair (the request names the oracle the answer must pass).
With `synth.tools=FILE` the samples are tool-using conversations (mens.synth.tool_synth): written
in mens's structured form, every call validated against its schema; an invalid one is rejected,
counted and quarantined (no repair turns: they rewrite a text answer).

Resumable: each finished leaf is written to DIR/.synth/leaves/<leaf>.json (temp + fsync +
rename) before anything else sees it; a rerun skips those leaves and assembles every leaf file
not yet merged into records.jsonl / pairs.jsonl / quarantine.jsonl (by record id: a crash
between two renames never duplicates a record).
"""
from __future__ import annotations

import hashlib
import json
import random
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mens.synth import dataset as ds
from mens.data.clean import record_id
from mens.synth.tree import Node, open_tree
from mens.errors import ConfigError

THINK = re.compile(r"^\s*<think>(.*?)</think>\s*", re.S)
LEAVES = Path(".synth") / "leaves"
MERGED = Path(".synth") / "merged.json"


def system_prompt(spoke) -> str:
    """The spoke's one system prompt (spoke.system_prompt), else one made of its domain."""
    return spoke.system_prompt or f"You are an expert assistant for {spoke.domain}."


# --- prompts -------------------------------------------------------------------------------
def sample_messages(cfg, leaf: Node, topic: list[str], seeds: list[dict]) -> list[dict]:
    s, spoke = cfg.synth, cfg.spoke
    lines = [f"Task: samples. Topic: {' > '.join(topic)}",
             f"Domain: {spoke.domain}." + (f" {leaf.description}" if leaf.description else ""),
             f"Write {s.per_leaf} diverse training examples on this topic: a realistic user "
             f"request (`prompt`) and the ideal assistant answer (`response`), as the assistant "
             f"described by this system prompt would give it:",
             f"<<<\n{system_prompt(spoke)}\n>>>",
             f"Difficulty {leaf.difficulty[0]}-{leaf.difficulty[1]} of 10; no two alike."]
    if s.strategy in ("few_shot_seed", "oracle_repair") and seeds:
        lines.append("Examples of the style wanted (do not copy them):")
        lines += [f"- prompt: {json.dumps(e['prompt'])}\n  response: {json.dumps(e['response'])}"
                  for e in seeds]
    if s.strategy == "cot_distill":
        lines.append("Begin each response with your reasoning inside <think>…</think>, then the "
                     "final answer.")
    if s.strategy == "oracle_repair":
        a = spoke.admission
        lines.append(f"Every response is checked by `{a.check}`: {a.description or a.check}. "
                     f"One that fails is sent back to you with the checker's diagnostics.")
    return [{"role": "user", "content": "\n".join(lines)}]


def repair_messages(cfg, prompt: str, failed: str, diagnostics: str) -> list[dict]:
    a = cfg.spoke.admission
    text = (f"Task: repair. This answer to the request below fails the `{a.check}` check "
            f"({a.description or a.check}).\nRequest:\n{prompt}\n\nFailed answer:\n{failed}\n\n"
            f"The checker's diagnostics:\n{diagnostics}\n\nGive the corrected full answer as "
            f"`response`.")
    return [{"role": "system", "content": system_prompt(cfg.spoke)},
            {"role": "user", "content": text}]


def seed_examples(cfg, leaf: Node, rng: random.Random) -> list[dict]:
    """k examples: the node's own seed prompts first, then records of the spoke's corpus."""
    k = cfg.synth.seed_examples
    out = [{"prompt": p, "response": "(write the answer)"} for p in leaf.seeds[:k]]
    if len(out) < k:
        recs = _corpus(cfg.spoke)
        for r in rng.sample(recs, min(k - len(out), len(recs))):
            users = [m["content"] for m in r["messages"] if m["role"] == "user"]
            if users:
                out.append({"prompt": users[0], "response": ds.answer(r)})
    return out


_CORPUS: dict[str, list[dict]] = {}


def _corpus(spoke) -> list[dict]:
    """The spoke's shipped chat records (read once per process; [] when it ships none)."""
    from mens.data.corpus import load_spoke
    from mens.data.formats import kind
    from mens.errors import DataError

    if spoke.name not in _CORPUS:
        try:
            _CORPUS[spoke.name] = [r for r in load_spoke(spoke)[0] if kind(r) == "chat"]
        except DataError:       # a spoke without a shipped corpus: the node's seeds only
            _CORPUS[spoke.name] = []
    return _CORPUS[spoke.name]


# --- one leaf ------------------------------------------------------------------------------
class Leaf:
    def __init__(self, cfg, teacher, leaf: Node, topic: list[str], tools: list[dict] | None = None):
        self.cfg, self.teacher, self.leaf, self.topic = cfg, teacher, leaf, topic
        self.tools = tools
        self.system = system_prompt(cfg.spoke)
        self.records: list[dict] = []
        self.pairs: list[dict] = []
        self.quarantine: list[dict] = []
        self.counts = {"samples": 0, "passed": 0, "unverified": 0, "repaired": 0,
                       "quarantined": 0, "invalid_replies": 0, "dropped_samples": 0}
        if tools:
            self.counts.update(tool_calls=0, invalid_tool_samples=0)

    def judge(self, responses: list[tuple[str, str]]) -> list:
        from mens.synth.oracle import judge_batch

        s = self.cfg.synth
        return judge_batch(self.cfg.spoke.admission.check,
                           [{"messages": self.chat(p, r)} for p, r in responses],
                           timeout_s=s.oracle_timeout_s, memory_mb=s.oracle_memory_mb)

    def chat(self, prompt: str, response: str, reasoning: str | None = None) -> list[dict]:
        answer = {"role": "assistant", "content": response}
        if reasoning and self.cfg.synth.keep_reasoning:
            answer["reasoning_content"] = reasoning
        return [{"role": "system", "content": self.system}, {"role": "user", "content": prompt},
                answer]

    def provenance(self, reply, **kw) -> dict:
        return {"origin": "topic_tree_synth", "topic": self.topic, "leaf": self.leaf.id,
                "teacher": {"name": reply.teacher, "model": reply.model},
                "strategy": self.cfg.synth.strategy, "created_at": ds.now(), **kw}

    def _usable(self, reply) -> bool:
        """Quarantine (counted) the samples the reply's schema check dropped; False when
        nothing in it was usable."""
        for d in reply.dropped:
            self.counts["dropped_samples"] += 1
            self._quarantine(reply, None, [], f"teacher output invalid: {d['error']}",
                             raw=json.dumps(d["item"], ensure_ascii=False)[:2000])
        if reply.data is None:
            self.counts["invalid_replies"] += 1
            self._quarantine(reply, None, [], "teacher output invalid: "
                             + "; ".join(reply.problems)[:2000], raw=(reply.raw or "")[:2000])
        return reply.data is not None

    def run(self) -> dict:
        if self.tools:
            return self.run_tools()
        s = self.cfg.synth
        seed = int(hashlib.sha256(f"{s.seed}/{self.leaf.id}".encode()).hexdigest()[:8], 16)
        seeds = seed_examples(self.cfg, self.leaf, random.Random(seed)) \
            if s.strategy in ("few_shot_seed", "oracle_repair") else []
        reply = self.teacher.ask("mens_samples", sample_messages(self.cfg, self.leaf, self.topic,
                                                                 seeds), seed=s.seed)
        if not self._usable(reply):
            return self.result()
        cands = []
        for sample in reply.data["samples"][:s.per_leaf]:
            m = THINK.match(sample["response"]) if s.strategy == "cot_distill" else None
            cands.append((sample["prompt"], sample["response"][m.end():] if m else
                          sample["response"], m.group(1).strip() if m else None))
        self.counts["samples"] += len(cands)
        verdicts = self.judge([(p, r) for p, r, _ in cands]) if cands else []
        for (prompt, response, reasoning), v in zip(cands, verdicts):
            if v.passed is not False:
                self._record(reply, prompt, response, reasoning, v, 0)
            else:
                self._repair(reply, prompt, response, reasoning, v)
        return self.result()

    def run_tools(self) -> dict:
        """synth.tools: tool-using conversations; a sample with an invalid call is rejected —
        counted (invalid_tool_samples) and quarantined with every problem."""
        from mens.synth import tool_synth as ts

        s = self.cfg.synth
        seeds = list(self.leaf.seeds[:s.seed_examples]) \
            if s.strategy in ("few_shot_seed", "oracle_repair") else []
        reply = self.teacher.ask("mens_tool_samples", ts.sample_messages(
            self.cfg, self.leaf, self.topic, self.system, self.tools, seeds), seed=s.seed)
        if not self._usable(reply):
            return self.result()
        judged = ts.judge(reply.data["samples"][:s.per_leaf], self.system, self.tools,
                          timeout_s=s.oracle_timeout_s, memory_mb=s.oracle_memory_mb)
        self.counts["samples"] += len(judged)
        for sample, rec, passed, why, n in judged:
            if passed is False:
                self.counts["invalid_tool_samples"] += 1
                self._quarantine(reply, sample["prompt"], [{
                    "response": json.dumps(sample, ensure_ascii=False), "diagnostics": why}],
                    "invalid tool call: " + why.replace("\n", "; ")[:2000])
                continue
            self.counts["passed" if passed else "unverified"] += 1
            self.counts["tool_calls"] += n
            self.records.append({
                "id": record_id(rec), **rec, "rating": None, "tags": ["train_sft"],
                "verdict": "passed" if passed else "unverified", **self.provenance(
                    reply, oracle={"check": " + ".join(ts.CHECKS[:2 if n else 1]),
                                   "passed": passed, "diagnostics": "" if passed else why,
                                   "unverified_reason": None if passed else why},
                    repair_turns=0)})
        return self.result()

    def _repair(self, reply, prompt, response, reasoning, first) -> None:
        attempts = [{"response": response, "diagnostics": first.diagnostics}]
        current, diags = response, first.diagnostics
        for turn in range(1, self.cfg.synth.repair_turns + 1):
            r = self.teacher.ask("mens_repair", repair_messages(self.cfg, prompt, current, diags),
                                 seed=self.cfg.synth.seed)
            if r.data is None:
                self.counts["invalid_replies"] += 1
                attempts.append({"response": (r.raw or "")[:2000],
                                 "diagnostics": "teacher output invalid: "
                                                + "; ".join(r.problems)[:1000]})
                continue
            fixed = r.data["response"]
            v = self.judge([(prompt, fixed)])[0]
            if v.passed is True:
                self._record(r, prompt, fixed, reasoning, v, turn)
                self.pairs.append(self._pair(r, prompt, fixed, response, first.diagnostics, turn))
                self.counts["repaired"] += 1
                return
            attempts.append({"response": fixed, "diagnostics": v.diagnostics})
            current, diags = fixed, v.diagnostics
        self._quarantine(reply, prompt, attempts, "never passed the oracle")

    def _record(self, reply, prompt, response, reasoning, v, turns: int) -> None:
        status = "unverified" if v.passed is None else "repaired" if turns else "passed"
        self.counts["passed" if status != "unverified" else "unverified"] += 1
        rec = {"messages": self.chat(prompt, response, reasoning)}
        rec = {"id": record_id(rec), **rec, "rating": None,
               "tags": ["train_sft", "train_dpo"] if turns else ["train_sft"],
               "verdict": status,
               **self.provenance(reply, oracle={"check": v.check, "passed": v.passed,
                                                "diagnostics": v.diagnostics,
                                                "unverified_reason": v.unverified_reason},
                                 repair_turns=turns)}
        if reasoning and not self.cfg.synth.keep_reasoning:
            rec["reasoning"] = reasoning          # kept for the curator, never trained on
        self.records.append(rec)

    def _pair(self, reply, prompt, chosen, rejected, diagnostics, turns) -> dict:
        pair = {"prompt": self.chat(prompt, "")[:2],
                "chosen": [{"role": "assistant", "content": chosen}],
                "rejected": [{"role": "assistant", "content": rejected}]}
        return {"id": record_id(pair), **pair, "rating": None, "tags": ["train_dpo"],
                "diagnostics": diagnostics,
                **self.provenance(reply, repair_turns=turns)}

    def _quarantine(self, reply, prompt, attempts, reason, raw=None) -> None:
        self.counts["quarantined"] += 1
        q = {"messages": self.chat(prompt, attempts[0]["response"])[:3] if prompt else [],
             "attempts": attempts, "reason": reason, "tags": ["quarantine"]}
        if raw is not None:
            q["raw"] = raw
        self.quarantine.append({"id": record_id({"messages": q["messages"], "text": raw or ""}),
                                **q, **self.provenance(reply)})

    def result(self) -> dict:
        return {"leaf": self.leaf.id, "topic": self.topic, "records": self.records,
                "pairs": self.pairs, "quarantine": self.quarantine, "counts": self.counts}


# --- the run -------------------------------------------------------------------------------
def leaf_file(out: Path, leaf_id: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_-]+", "_", leaf_id)[:60]
    return out / LEAVES / f"{safe}-{hashlib.sha256(leaf_id.encode()).hexdigest()[:8]}.json"


def synth(cfg, log=print) -> dict:
    """Synthesize every leaf not yet done; assemble; clean. → the run's counts."""
    from mens.config.schema import SYNTH_STRATEGIES
    from mens.synth.teacher import Ledger, Teacher

    if cfg.synth.strategy not in SYNTH_STRATEGIES:
        raise ConfigError(f"`synth.strategy={cfg.synth.strategy}` is not one of "
                          f"{', '.join(SYNTH_STRATEGIES)}.", key="synth.strategy")
    tools = None
    if cfg.synth.tools:   # tool-using records; their calls are the oracle's (mens.synth.tool_synth)
        from mens.synth.tool_synth import check_strategy, load_tools
        check_strategy(cfg.synth.strategy)
        tools = load_tools(cfg.synth.tools)
    out = ds.dataset_dir(cfg)
    tree = open_tree(cfg, out)
    if not tree.path.is_file():
        tree.save()
    leaves = tree.leaves()
    todo = [(n, t) for n, t in leaves if not leaf_file(out, n.id).is_file()]
    oracle = (f"every tool call against the schemas of {len(tools)} tools in synth.tools "
              f"(jsonschema; the spoke's own check {cfg.spoke.admission.check} is not run, and a "
              f"sample with an invalid call is quarantined: no repair turns)"
              if tools else cfg.spoke.admission.check)
    log(f"mens data synth: {cfg.spoke.name}, {len(leaves)} leaves ({len(leaves) - len(todo)} "
        f"done before), strategy {cfg.synth.strategy}, oracle {oracle} → {out}")
    ledger = Ledger()
    teacher = Teacher.from_config(cfg.teacher, ledger)

    def one(item):
        node, topic = item
        result = Leaf(cfg, teacher, node, topic, tools).run()
        ds.write_durable(leaf_file(out, node.id), json.dumps(result, ensure_ascii=False))
        return result

    counts: dict = {}
    try:
        with ThreadPoolExecutor(max_workers=teacher.concurrency) as pool:
            for result in pool.map(one, todo):
                for k, v in result["counts"].items():
                    counts[k] = counts.get(k, 0) + v
    finally:
        ds.write_stats(out, ledger, counts, cfg)
    merged = assemble(out, tree)
    from mens.synth.curate import clean_dataset
    cleaned = clean_dataset(cfg, out)
    ds.write_stats(out, None, None, cfg, merged=merged, cleaned=cleaned)
    log(f"mens data synth: {json.dumps(counts)}; records {merged['records']}, pairs "
        f"{merged['pairs']}, quarantine {merged['quarantine']}; cleaning removed "
        f"{cleaned['near_duplicates']} near-duplicates, {cleaned['contaminated']} contaminated")
    return {"counts": counts, "merged": merged, "clean": cleaned, "out": str(out)}


def assemble(out: Path, tree) -> dict:
    """Merge the leaf files not merged yet into the jsonl files (ids already there are
    skipped), then record them as merged; the tree's `verified` counts follow."""
    merged_path = out / MERGED
    merged = set(json.loads(merged_path.read_text())) if merged_path.is_file() else set()
    files = sorted((out / LEAVES).glob("*.json"))
    new = [json.loads(f.read_text()) for f in files if f.stem not in merged]
    by_leaf = {r["leaf"]: r for r in new}
    order = [by_leaf[n.id] for n, _ in tree.leaves() if n.id in by_leaf] + \
        [r for r in new if r["leaf"] not in {n.id for n, _ in tree.leaves()}]
    sizes = {}
    for name, key in ((ds.RECORDS, "records"), (ds.PAIRS, "pairs"),
                      (ds.QUARANTINE, "quarantine")):
        have = ds.read_jsonl(out / name)
        ids = {r.get("id") for r in have}
        for result in order:
            for r in result[key]:
                if r["id"] not in ids:
                    ids.add(r["id"])
                    have.append(r)
        ds.write_jsonl(out / name, have)
        sizes[key] = len(have)
    ds.write_durable(merged_path, json.dumps(sorted(merged | {f.stem for f in files})))
    verified: dict[str, int] = {}
    for r in ds.read_jsonl(out / ds.RECORDS):
        if r.get("verdict") in ("passed", "repaired"):
            verified[r.get("leaf")] = verified.get(r.get("leaf"), 0) + 1
    for n, _ in tree.nodes():
        if not n.children:
            n.verified = verified.get(n.id, n.verified)
    tree.save()
    return sizes

