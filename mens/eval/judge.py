"""Pairwise judge: base vs tuned answers to the same prompts, judged by a teacher
(mens.synth.teacher, json_schema `mens_judgement` → {"winner": "A" | "B" | "tie", "reason"}).

Each prompt is asked twice, (A = base, B = tuned) and (A = tuned, B = base): a judge that
favours a position then cancels itself out instead of favouring a model. Per prompt the two
verdicts combine to
    win   tuned preferred in both orders, or in one with a tie in the other
    tie   both ties, or one verdict each way (position-inconsistent: counted as such)
    loss  base preferred in both, or in one with a tie
A reply that is not a usable verdict (bad JSON, schema violation) leaves its prompt out of the
rate, counted as `invalid` with the teacher's problems kept — never a silent tie.

Row (group "judge", name "judge/win_rate"): the tuned model's win rate, win + tie / 2, with a
bootstrap interval over prompts; gain = win rate − 0.5 (> 0: the judge prefers the tuned
model). Its cost (tokens, USD when the teacher is priced) is in `stats`.
"""
from __future__ import annotations

import sys

from mens.errors import ConfigError
from mens.eval.stats import interval

SYSTEM = ("You are an impartial judge. You see a conversation and two candidate answers to its "
          "last user message, A and B. Decide which answer serves the user better: correctness "
          "first, then completeness and following the conversation's instructions, then "
          "clarity. Ignore the answers' order and length as such. Explain the decisive "
          "difference in one or two sentences in `reason`, then give `winner`: \"A\", \"B\", or "
          "\"tie\" when neither is better.")
OUTCOME = {2: "win", 1: "win", 0: "tie", -1: "loss", -2: "loss"}
SCORE = {"win": 1.0, "tie": 0.5, "loss": 0.0}


def judge_messages(messages: list[dict], answer_a: str, answer_b: str) -> list[dict]:
    """The judge's request: the conversation up to the prompt, then both answers, tagged."""
    convo = "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in messages)
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"<conversation>\n{convo}\n</conversation>\n\n"
                                        f"<answer_a>{answer_a}</answer_a>\n\n"
                                        f"<answer_b>{answer_b}</answer_b>"}]


def judge(teacher, prompts: list[list[dict]], base_answers: list[str], tuned_answers: list[str],
          eval_cfg) -> dict:
    """{"rows": [judge/win_rate], "pairs": [per prompt: both verdicts, outcome], "stats"}.
    teacher: a mens.synth.teacher.Teacher. eval_cfg: cfg.eval (confidence, bootstrap, seed)."""
    from mens.synth.teacher import TeacherUnavailable

    if not len(prompts) == len(base_answers) == len(tuned_answers):
        raise ValueError(f"judge needs one base and one tuned answer per prompt: {len(prompts)} "
                         f"prompts, {len(base_answers)} base, {len(tuned_answers)} tuned")
    orders = []          # (prompt index, which model is A)
    requests = []
    for i, msgs in enumerate(prompts):
        for a_is, (a, b) in (("base", (base_answers[i], tuned_answers[i])),
                             ("tuned", (tuned_answers[i], base_answers[i]))):
            orders.append((i, a_is))
            # temperature 0: a verdict, not a creative sample (teacher.temperature is synthesis's)
            requests.append(("mens_judgement", judge_messages(msgs, a, b), {"temperature": 0.0}))
    try:
        replies = teacher.ask_many(requests)
    except TeacherUnavailable as e:        # a bare client: say which endpoint, as the cascade does
        raise ConfigError(f"the eval judge could not reach its teacher: {e.reason}. Start the "
                          f"server or fix teacher=…, or run without eval.judge.",
                          key="teacher") from None
    except ConfigError as e:               # the cascade is exhausted: its paragraph names each
        raise ConfigError(f"the eval judge (eval.judge) could not be asked: {e.message}",
                          key=e.key or "teacher") from None

    pairs = [{"index": i, "prompt": msgs[-1]["content"] if msgs else "",
              "base": base_answers[i], "tuned": tuned_answers[i], "verdicts": []}
             for i, msgs in enumerate(prompts)]
    for (i, a_is), reply in zip(orders, replies):
        winner = (reply.data or {}).get("winner")
        b_is = "tuned" if a_is == "base" else "base"
        pairs[i]["verdicts"].append({
            "a": a_is, "winner": winner,
            "prefers": {"A": a_is, "B": b_is, "tie": "tie"}.get(winner),
            "reason": (reply.data or {}).get("reason"), "teacher": reply.teacher,
            "model": reply.model, "problems": reply.problems,
            "raw": None if reply.ok else reply.raw})
    counts = {"win": 0, "tie": 0, "loss": 0, "inconsistent": 0, "invalid": 0}
    scores = []
    for p in pairs:
        prefs = [v["prefers"] for v in p["verdicts"]]
        if None in prefs:
            p["outcome"], p["consistent"] = "invalid", None
            counts["invalid"] += 1
            continue
        votes = [{"tuned": 1, "base": -1, "tie": 0}[x] for x in prefs]
        p["outcome"] = OUTCOME[sum(votes)]
        # the same position won both times: the verdict followed the order, not the answers
        p["consistent"] = not (votes[0] == -votes[1] != 0)
        counts[p["outcome"]] += 1
        counts["inconsistent"] += not p["consistent"]
        scores.append(SCORE[p["outcome"]])
    if counts["invalid"]:
        print(f"mens: note: the judge gave no usable verdict for {counts['invalid']} of "
              f"{len(pairs)} prompt(s); they are left out of judge/win_rate (see its pairs)",
              file=sys.stderr)
    rate = interval(scores, confidence=eval_cfg.confidence, reps=eval_cfg.bootstrap, seed=eval_cfg.seed)
    gain = {"value": None if rate["value"] is None else rate["value"] - 0.5,
            "ci": None if rate["ci"] is None else [c - 0.5 for c in rate["ci"]]}
    stats = _cost(replies, teacher)
    row = {"name": "judge/win_rate", "group": "judge", "task": "judge", "metric": "win_rate",
           "spoke": None, "higher_is_better": True, "n": len(scores), "tuned": rate,
           "gain": gain, "version": None, "counts": counts, "stats": stats}
    return {"rows": [row], "pairs": pairs, "stats": stats}


def _cost(replies, teacher) -> dict:
    """This judge's calls: tokens and USD from each reply's usage (priced by the teacher's
    ledger; null when a teacher that answered has no price), and which teachers answered."""
    prompt = sum(r.usage.prompt_tokens for r in replies)
    completion = sum(r.usage.completion_tokens for r in replies)
    usd = [r.usage.cost_usd for r in replies]
    teachers = sorted({r.teacher for r in replies})
    return {"calls": len(replies), "prompt_tokens": prompt, "completion_tokens": completion,
            "cost_usd": None if any(u is None for u in usd) else sum(usd),
            "teachers": teachers, "models": sorted({r.model for r in replies}),
            "ledger": teacher.ledger.as_dict()["totals"]}
