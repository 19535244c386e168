"""Before a grpo run: will its groups carry a signal? With a pass rate p per sampled answer and
G answers per prompt, a group's pass/fail rewards are all equal — zero std, zero advantage, no
gradient — with probability p^G + (1 − p)^G: the expected `frac_reward_zero_std` of the first
steps. Above ZERO_STD_WARN the plan warns, with the number and the ways out.

p comes from the warm start: the run dir of train.init_adapter (the adapter's own dir or the run
dir above it, mens.run.rundir.RunDir.ADAPTER) when it holds a measure of its held-out pass rate
on this run's spoke — `mens eval`'s in-domain pass@1 (sampled answers, eval.json) first, else
the greedy pass rate a grpo run measured after training (summary.json's held_out_oracle).
Without one the plan says "pass rate unknown" (a note, no warning). Pure file reading, no torch.
"""
from __future__ import annotations

import json
from pathlib import Path

ZERO_STD_WARN = 0.8          # the threshold: most groups with one reward = no signal
MAX_G = 64                   # the largest group the ways out suggest


def zero_std_share(p: float, G: int) -> float:
    """P(all G pass/fail rewards equal) for independent answers passing at rate p."""
    return p ** G + (1 - p) ** G


def smallest_group(p: float, G: int) -> int | None:
    """The smallest group size above G (≤ MAX_G) whose expected zero-std share is ≤ the
    threshold; None when none is (p at 0 or 1: no group size helps)."""
    return next((g for g in range(G + 1, MAX_G + 1) if zero_std_share(p, g) <= ZERO_STD_WARN),
                None)


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def warm_start_pass_rate(init_adapter: str | None, spoke: str) -> dict:
    """{"p", "source", "n", "why"}: the warm start's held-out pass rate on `spoke`, or p None
    and why it is unknown."""
    if not init_adapter:
        return {"p": None, "why": "the run starts from the base (no train.init_adapter)"}
    path = Path(init_adapter)
    dirs = [d for d in (path, path.parent) if (d / "summary.json").is_file()
            or (d / "eval.json").is_file()]
    if not dirs:
        return {"p": None, "why": f"train.init_adapter={init_adapter} is not in a mens run dir "
                                  f"(no summary.json or eval.json beside it)"}
    run = dirs[0]
    ev = _read(run / "eval.json")
    seen = []
    if ev and ev.get("kind") == "mens.eval":
        for row in ev.get("rows") or []:
            if row.get("group") == "in_domain" and row.get("metric") == "pass@1":
                tuned = row.get("tuned") or {}
                if row.get("spoke") != spoke:
                    seen.append(f"eval.json's pass@1 is on spoke {row.get('spoke')}")
                elif tuned.get("value") is not None:
                    return {"p": float(tuned["value"]), "n": tuned.get("n"),
                            "source": f"{run / 'eval.json'}: in-domain pass@1 of the tuned model "
                                      f"(sampled answers, n={tuned.get('n')})"}
    summary = _read(run / "summary.json") or {}
    oracle = summary.get("held_out_oracle") or {}
    after = oracle.get("after") or {}
    if oracle and oracle.get("spoke") != spoke:
        seen.append(f"summary.json's held-out oracle is on spoke {oracle.get('spoke')}")
    elif after.get("pass_rate") is not None:
        return {"p": float(after["pass_rate"]), "n": after.get("n"),
                "source": f"{run / 'summary.json'}: held_out_oracle.after.pass_rate (greedy "
                          f"answers, n={after.get('n')}; sampled answers pass less often)"}
    why = f"{run} records no held-out pass rate on spoke {spoke}"
    return {"p": None, "why": why + (f" ({'; '.join(seen)})" if seen else "") +
            ": `mens eval` it first (eval.json's pass@1)"}


def signal(G: int, reward: str, format_weight: float, init_adapter: str | None,
           spoke: str) -> dict:
    """plan.json's `signal`: the pass rate, where from, the expected frac_reward_zero_std and
    the line the plan prints (`warn`: a warning, else a note)."""
    got = warm_start_pass_rate(init_adapter, spoke)
    p = got["p"]
    if p is None:
        return {"pass_rate": None, "warn": False, "expected_frac_reward_zero_std": None,
                "line": f"grpo: warm start's pass rate unknown — {got['why']}; the expected "
                        f"share of groups with one reward (frac_reward_zero_std) is not planned"}
    share = zero_std_share(p, G)
    out = {"pass_rate": p, "source": got["source"], "group": G,
           "expected_frac_reward_zero_std": round(share, 4), "warn": share > ZERO_STD_WARN}
    said = (f"grpo: the warm start passes {p:.1%} ({got['source']}): with G={G} answers per "
            f"prompt, {share:.0%} of groups are expected to get one pass/fail reward "
            f"(p^G + (1−p)^G; frac_reward_zero_std)")
    if reward == "teacher":
        said += "; rewards come from the teacher, not the oracle: a rough guide only"
    elif reward == "partial" or format_weight:
        said += ("; partial credit" if reward == "partial" else "; the format reward") + \
            " breaks some ties, so fewer in fact"
    if not out["warn"]:
        out["line"] = said
        return out
    ways = []
    g = smallest_group(p, G)
    if g:
        ways.append(f"a larger group (lane.grpo.num_generations={g} brings it to "
                    f"{zero_std_share(p, g):.0%})")
    if reward == "pass":
        ways.append("partial rewards (lane.grpo.reward=partial)")
    ways.append("a warmer start (more SFT first: the answers rarely pass)" if p < 0.5 else
                "a cooler start (harder prompts, or a less-trained adapter: the answers nearly "
                "always pass)")
    hacking = ""
    if p < 0.5 and (reward == "partial" or format_weight):
        hacking = (" — and what signal is left comes from partial/format credit, not from "
                   "passing: reward hacking (reward up, oracle pass rate not) is likely")
    out["line"] = (f"{said}: most groups will teach nothing{hacking}. Ways out: "
                   f"{'; '.join(ways)}.")
    return out
