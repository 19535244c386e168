"""GRPO's verifiable rewards: a spoke's own admission oracle (mens.synth.oracle) judging sampled
answers, in its sandboxed child processes, several batches at once.

Kinds (`reward`):
  pass      1 when the oracle passes the answer, else 0.
  partial   the share of the answer's pieces (fenced blocks, tool calls) that pass the oracle
            each alone; for checks whose pieces are judged independently (PIECES). A check that
            reads the exchange as a whole (a transcript, a reply chain, one SKILL.md) has no
            pieces: partial is pass there, said once and counted in the metrics.
  teacher   a judge through the teacher protocol (mens.synth.teacher, the run's `teacher=`
            cascade): each answer scored 0..10 against its prompt (json_schema `mens_reward`,
            temperature 0), reward score / 10 (teacher_rewards).
  shuffled  a control (issue #39): the pass reward permuted within each group (the answers to
            one prompt, consecutive): the same rewards, no longer tied to the answers. A loop
            that learns from it is learning from noise.
  length    a control (issue #39): the answer's length (characters / LENGTH_CHARS, at most 1),
            never the oracle's verdict, which is still judged and logged (rewards/pass/mean):
            a reward that rises while the pass rate does not is reward hacking.
An optional format reward (1/0, in this process, linear scans only) says the answer has the
shape the oracle looks for: a closed non-empty fence of the check's language, a tool call in
the model's syntax. The total is the kind's reward + format_weight × format.

Tool calls are read in the run's tool-call syntax (`syntax`: the encoder's tool_syntax; "hermes",
the <tool_call> blocks of the tiny rung and Qwen, by default) — by the oracle's child for the
verdict (mens.synth.tool_checks), and here, linearly, for the pieces and the format reward.

Never raises on an answer: a check that times out or crashes is reward 0, counted
(`oracle/timeouts`, `oracle/crashes`); an oracle that cannot run here (no bash, no cargo) gives
NaN, counted (`oracle/unverified`) and its reason kept — never a pass, never a fail. A teacher
reply that is no usable score (not JSON, off the schema) is reward 0, counted
(`rewards/teacher_invalid`); a teacher that cannot be reached at all is a ConfigError (exit 2).
"""
from __future__ import annotations

import math
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from mens.config.cards.grpo import REWARDS
from mens.data.tool_syntax import parse
from mens.data.tools import call_text
from mens.errors import ConfigError
from mens.synth import oracle
from mens.synth.oracle_checks import CHECKS, SHELL_LANGS, answer_tag, fences, oracle_record

KINDS = REWARDS   # declared once, beside lane.grpo's section (mens.config.cards.grpo)
CONTROLS = ("shuffled", "length")          # rewards that are not the task's (see above)
LENGTH_CHARS = 100
# check -> the fence languages of its pieces; "tool_call": <tool_call> bodies. Each piece of
# these checks is judged on its own by the oracle (every bash/python/vox block alone, each rust
# block its own module of the scratch crate, each call against its tool's schema), so a piece
# judged alone gets the verdict it gets inside the whole answer.
PIECES = {"shell_syntax": SHELL_LANGS, "python_parses": ("python", "py"), "vox_parses": ("vox",),
          "rust_compiles": ("rust", "toml"), "tool_call_schema": "tool_call"}
# the shape a format reward looks for, for the checks without pieces
SHAPES = {"mesh_messages": ("json",), "skill_frontmatter": ("markdown", "md", "---"),
          "transcript_structure": ()}
TAGGED = ("arith_answer", "answer_first")   # their shape: a closed, non-empty <answer>…</answer>
_said: set[str] = set()


@dataclass
class Rewards:
    """One value per answer, in order. NaN: the oracle could not judge it here (unverified)."""
    total: list[float]                 # what the advantages are computed from
    passed: list[float] | None         # the oracle's pass; None when reward="teacher"
    partial: list[float] | None        # None unless reward="partial"
    format: list[float] | None         # None unless format_weight > 0
    metrics: dict = field(default_factory=dict)
    teacher: list[float] | None = None   # reward="teacher": score / 10, 0 for an unusable reply


def tool_call_bodies(text: str) -> list[str]:
    """The body of each closed <tool_call>…</tool_call> (what oracle_checks.TOOL_CALL finds), by
    str.find: linear on any model text."""
    out, i = [], 0
    while (start := text.find("<tool_call>", i)) >= 0:
        end = text.find("</tool_call>", start + 11)
        if end < 0:
            break
        out.append(text[start + 11:end].strip())
        i = end + 12
    return out


def _hermes(syntax: str | None) -> bool:
    return syntax in (None, "hermes")


def pieces(check: str, text: str, syntax: str | None = "hermes") -> list[str]:
    """The answer's pieces, each re-written as an answer of its own. A tool call is re-written
    as a Hermes <tool_call> block whatever the model's syntax (judge those with "hermes"); the
    Llama 3 and Mistral forms parse as JSON, in linear time."""
    kind = PIECES[check]
    if kind == "tool_call":
        bodies = tool_call_bodies(text) if _hermes(syntax) else \
            [call_text(c) for c in parse(text, syntax).calls]
        return [f"<tool_call>\n{b}\n</tool_call>" for b in bodies]
    return [f"```{lang}\n{body}```" for lang, body in fences(text) if lang in kind]


def has_shape(check: str, text: str, syntax: str | None = "hermes") -> bool:
    """The format reward: the answer holds what the check looks for (not whether it is right)."""
    if check == "tool_call_schema":
        return bool(tool_call_bodies(text) if _hermes(syntax) else parse(text, syntax).calls)
    if check in TAGGED:
        return bool(answer_tag(text))
    langs = PIECES.get(check) or SHAPES.get(check)
    if langs is None:
        raise ConfigError(f"no format reward is defined for the admission check `{check}`: "
                          f"set grpo.format_weight=0 or add its shape to "
                          f"mens.objective.rewards.SHAPES.", key="grpo.format_weight")
    if check == "transcript_structure":     # a final reply: text, no dangling tool call
        return bool(text.strip()) and (text.count("<tool_call>") == text.count("</tool_call>")
                                       if _hermes(syntax) else not parse(text, syntax).malformed)
    if "---" in langs and text.startswith("---"):
        return True
    return any(lang in langs and body.strip() and (lang != "markdown" and lang != "md"
                                                  or body.startswith("---"))
               for lang, body in fences(text))


def _judge(check: str, records: list[dict], workers: int, opts: dict) -> list:
    """Verdicts in order: `workers` oracle batches at once (each its own child process); a batch
    whose machinery fails outright gives failed verdicts saying so, not an exception."""
    if not records:
        return []
    size = math.ceil(len(records) / max(1, workers))
    chunks = [records[i:i + size] for i in range(0, len(records), size)]

    def one(chunk):
        try:
            return oracle.judge_batch(check, chunk, **opts)
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001 — an answer never crashes training
            why = f"the check's process could not run: {type(e).__name__}: {e}"
            return [oracle.Verdict(False, why, check)] * len(chunk)
    with ThreadPoolExecutor(max_workers=len(chunks)) as pool:
        return [v for part in pool.map(one, chunks) for v in part]


def oracle_rewards(check: str, records: list[dict], heads: list[list[dict]], texts: list[str], *,
                   reward: str = "pass", format_weight: float = 0.0, workers: int = 2,
                   timeout_s: float = oracle.TIMEOUT_S, memory_mb: int = oracle.MEMORY_MB,
                   path: str | None = None, teacher=None,
                   syntax: str | None = "hermes") -> Rewards:
    """Rewards of `texts` (B·G answers), each answering the prompt `heads[i]` (the messages up to
    the last user turn) of the held-out or training record `records[i]`. reward="teacher":
    scored by `teacher` (a mens.synth.teacher.Teacher) instead, see teacher_rewards. syntax:
    the tool-call syntax the model writes (mens.data.tool_syntax)."""
    if reward not in KINDS:
        raise ConfigError(f"grpo.reward={reward} is not a reward; known: "
                          f"{', '.join(KINDS)}.", key="grpo.reward")
    if not len(records) == len(heads) == len(texts):
        raise ValueError(f"{len(records)} records, {len(heads)} heads, {len(texts)} answers")
    if reward == "teacher":            # the oracle only for the format reward, if weighted
        if teacher is None:
            raise ConfigError("grpo.reward=teacher scores answers through the teacher protocol, "
                              "and no teacher was given: build one from the run's `teacher=` "
                              "config (mens.synth.teacher.Teacher.from_config).", key="teacher")
        return teacher_rewards(teacher, heads, texts, check=check, format_weight=format_weight,
                               syntax=syntax)
    if check not in CHECKS:
        raise ConfigError(f"unknown admission check `{check}`; known: "
                          f"{', '.join(sorted(CHECKS))}.", key="spoke.admission.check")
    started = time.monotonic()
    split = reward == "partial" and check in PIECES
    if reward == "partial" and not split and check not in _said:
        _said.add(check)                     # a loud fallback, once per process and check
        print(f"mens: note: grpo.reward=partial: the `{check}` check judges the whole answer "
              f"(no independent pieces), so its partial reward is the pass reward",
              file=sys.stderr)
    parts = [pieces(check, t, syntax) if split else [] for t in texts]
    whole = [oracle_record(r, h, t, check, syntax) for r, h, t in zip(records, heads, texts)]
    piece_syntax = "hermes" if PIECES.get(check) == "tool_call" else syntax   # see pieces()
    each = [oracle_record(r, h, p, check, piece_syntax)
            for r, h, ps in zip(records, heads, parts) for p in ps]
    verdicts = _judge(check, whole + each, workers,
                      {"timeout_s": timeout_s, "memory_mb": memory_mb, "path": path})
    main, rest = verdicts[:len(whole)], iter(verdicts[len(whole):])
    per = [[next(rest) for _ in ps] for ps in parts]     # each answer's piece verdicts

    def score(v) -> float:
        return math.nan if v.passed is None else float(v.passed)
    passed = [score(v) for v in main]
    partial = None
    if reward == "partial":
        partial = [p if not split else 0.0 if not vs else
                   math.nan if any(v.passed is None for v in vs) else
                   sum(bool(v.passed) for v in vs) / len(vs) for p, vs in zip(passed, per)]
    fmt = [float(has_shape(check, t, syntax)) for t in texts] if format_weight else None
    base = partial if partial is not None else passed
    if reward in CONTROLS:
        base = control(reward, records, texts, passed)
    total = [b + format_weight * f for b, f in zip(base, fmt)] if fmt else list(base)
    fails = [{oracle.failure(v) for v in [m, *vs]} for m, vs in zip(main, per)]
    unverified = [v for v in main + [v for vs in per for v in vs] if v.passed is None]
    metrics = {
        "rewards/pass/mean": _nanmean(passed), "reward": _nanmean(total),
        "oracle/answers": len(texts), "oracle/pieces": sum(map(len, parts)),
        "oracle/timeouts": sum("timeout" in f for f in fails),
        "oracle/crashes": sum("crash" in f and "timeout" not in f for f in fails),
        "oracle/unverified": sum(math.isnan(p) for p in passed),
        "oracle/unverified_reasons": sorted({v.unverified_reason or "?" for v in unverified}),
        "oracle/seconds": time.monotonic() - started,
        "rewards/partial_is_pass": reward == "partial" and not split,
    }
    if partial is not None:
        metrics["rewards/partial/mean"] = _nanmean(partial)
    if fmt is not None:
        metrics["rewards/format/mean"] = _nanmean(fmt)
    if metrics["oracle/unverified"]:
        print(f"mens: note: {metrics['oracle/unverified']} of {len(texts)} answers are "
              f"unverified (reward NaN): {'; '.join(metrics['oracle/unverified_reasons'])}",
              file=sys.stderr)
    return Rewards(total, passed, partial, fmt, metrics)


def control(reward: str, records: list[dict], texts: list[str], passed: list[float]) -> list[float]:
    """A control reward (CONTROLS), said once per process. shuffled: each group's pass rewards
    permuted (a group: consecutive answers to the same record, as the GRPO step lays them out),
    seeded by the answers themselves, so a rerun shuffles alike and each step differently."""
    import hashlib
    import random

    if reward not in _said:
        _said.add(reward)
        print(f"mens: note: grpo.reward={reward} is a control, not the task's reward: "
              + ("the oracle's pass rewards are shuffled within each group" if reward == "shuffled"
                 else f"the reward is the answer's length (characters / {LENGTH_CHARS}, at most "
                      f"1); the oracle's verdict is only logged"), file=sys.stderr)
    if reward == "length":
        return [min(len(t) / LENGTH_CHARS, 1.0) for t in texts]
    rng = random.Random(hashlib.sha256("\0".join(texts).encode()).hexdigest())
    keys = [r.get("id", id(r)) for r in records]
    out, i = [], 0
    while i < len(passed):
        j = i + 1
        while j < len(passed) and keys[j] == keys[i]:
            j += 1
        group = passed[i:j]
        rng.shuffle(group)
        out += group
        i = j
    return out


SYSTEM = ("You are a strict grader. You see a conversation and one candidate answer to its "
          "last user message. Judge how well the answer serves the user: correctness first, "
          "then completeness and following the conversation's instructions, then clarity; "
          "length as such is no merit. Explain the decisive strengths and faults in one or two "
          "sentences in `reason`, then give `score`, an integer from 0 (wrong, empty or off the "
          "task) to 10 (correct and complete).")
SCORE_MAX = 10          # mens_reward's score is 0..10: the reward is score / SCORE_MAX


def reward_messages(messages: list[dict], answer: str) -> list[dict]:
    """The grader's request: the conversation up to the prompt, then the answer, tagged."""
    convo = "\n\n".join(f"[{m['role']}]\n{m.get('content') or ''}" for m in messages)
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"<conversation>\n{convo}\n</conversation>\n\n"
                                        f"<answer>{answer}</answer>"}]


def teacher_rewards(teacher, heads: list[list[dict]], texts: list[str], *,
                    check: str | None = None, format_weight: float = 0.0,
                    syntax: str | None = "hermes") -> Rewards:
    """Rewards of `texts`, each scored against its prompt `heads[i]` by `teacher` (a
    mens.synth.teacher.Teacher; json_schema `mens_reward`, temperature 0): score / 10, plus
    format_weight × the format reward of the admission `check` when format_weight > 0.

    A reply that is no usable score is reward 0, counted (`rewards/teacher_invalid`) with its
    problems said on stderr — never a crash. A teacher that cannot be reached (every candidate
    failed) is a ConfigError naming each endpoint, key `teacher`."""
    from mens.synth.teacher import TeacherUnavailable

    if len(heads) != len(texts):
        raise ValueError(f"{len(heads)} heads, {len(texts)} answers")
    started = time.monotonic()
    # temperature 0: a grade, not a creative sample (teacher.temperature is synthesis's)
    requests = [("mens_reward", reward_messages(h, t), {"temperature": 0.0})
                for h, t in zip(heads, texts)]
    try:
        replies = teacher.ask_many(requests)
    except TeacherUnavailable as e:        # a bare client: say which endpoint, as the cascade does
        raise ConfigError(f"grpo.reward=teacher could not reach its teacher: {e.reason}. Start "
                          f"the server or fix teacher=…, or use grpo.reward=pass|partial (the "
                          f"spoke's own oracle).", key="teacher") from None
    except ConfigError as e:               # the cascade is exhausted: its paragraph names each
        raise ConfigError(f"grpo.reward=teacher could not ask its teacher: {e.message}",
                          key=e.key or "teacher") from None
    valid = [r.ok for r in replies]    # data: validated against mens_reward (score 0..10)
    graded = [r.data["score"] / SCORE_MAX if ok else 0.0 for r, ok in zip(replies, valid)]
    fmt = [float(has_shape(check, t, syntax)) for t in texts] if format_weight else None
    total = [g + format_weight * f for g, f in zip(graded, fmt)] if fmt else list(graded)
    invalid = len(valid) - sum(valid)
    problems = sorted({p for r, ok in zip(replies, valid) if not ok
                       for p in (r.problems or ["no score in the reply"])})
    usd = [r.usage.cost_usd for r in replies]
    metrics = {
        "rewards/teacher/mean": _nanmean(graded), "reward": _nanmean(total),
        "rewards/teacher_invalid": invalid, "teacher/answers": len(texts),
        "teacher/prompt_tokens": sum(r.usage.prompt_tokens for r in replies),
        "teacher/completion_tokens": sum(r.usage.completion_tokens for r in replies),
        # None: a teacher that answered has no price (left out of the step's numbers)
        "teacher/cost_usd": None if any(u is None for u in usd) else sum(usd),
        "teacher/seconds": time.monotonic() - started,
        "teacher/teachers": sorted({r.teacher for r in replies}),
        "teacher/problems": problems,
    }
    if fmt is not None:
        metrics["rewards/format/mean"] = _nanmean(fmt)
    if invalid:
        print(f"mens: note: the teacher gave no usable score for {invalid} of {len(texts)} "
              f"answers (reward 0): {'; '.join(problems)[:500]}", file=sys.stderr)
    return Rewards(total, None, None, fmt, metrics, teacher=graded)


def _nanmean(xs: list[float]) -> float:
    vals = [x for x in xs if not math.isnan(x)]
    return sum(vals) / len(vals) if vals else math.nan
