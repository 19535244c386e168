"""skill_creation: SKILL.md files (YAML front matter + instructions), revisions, composed
workflow skills, and preference pairs whose rejected side has one named, realistic flaw."""
from __future__ import annotations

import json

from .common import fence, join, jdump, msg, pair, record
from .skills_data import ECO, TOPICS

SYSTEM = [
    "You write agent skills. A skill is a folder with SKILL.md: YAML front matter (`name`: "
    "kebab-case, `description`: what it does AND when to use it), then concise instructions an "
    "agent can follow. Put SKILL.md in a ```markdown block.",
    "You are a skill author for coding agents. Good skills have a precise description (it is "
    "how the agent decides to load the skill), numbered steps, a way to verify success, and "
    "known pitfalls.",
    "Author reusable agent skills as SKILL.md with front matter. Keep them short, concrete and "
    "safe; prefer commands the agent can run and check.",
]
ASKS = ["Create a skill that {p} for {e} projects.", "Write a SKILL.md: it {p} ({e} repos).",
        "I need an agent skill which {p}. Our stack is {e}.", "Skill request — {p}; target: {e}.",
        "Make a skill for our {e} services that {p}.", "Draft a skill ({e}) that {p}."]
EXTRAS = ["", " Keep it short.", " Include how to verify the result.", " The team is new to "
          "this, so be explicit.", " It runs in CI as well as locally.", " Mention the main "
          "pitfall.", " Assume the agent has shell access.", " Link nothing external.",
          " We review every skill, so make steps checkable."]


def yaml_str(s: str) -> str:
    return json.dumps(s) if any(ch in s for ch in ":#'\"{}[]") or s[0] in "-?!&*|>%@`" else s


def topic(c):
    slug, purpose, trigger, steps, verify, pitfall = c.pick(TOPICS)
    eco = c.choice(sorted(ECO))
    fmt = lambda s: s.format(test=ECO[eco]["test"], **{k: v for k, v in ECO[eco].items() if k != "test"})
    return dict(slug=slug, purpose=purpose, trigger=trigger, steps=[fmt(s) for s in steps],
                verify=fmt(verify), pitfall=pitfall, eco=eco,
                name=f"{slug}-{eco}" if c.chance(0.5) else slug)


def ask(c, t):
    return c.pick(ASKS).format(p=t["purpose"], e=t["eco"]) + c.choice(EXTRAS)


def skill_md(t, *, desc=None, name=None, trigger=True, verify=True, pitfalls=True, steps=None,
             script=None, frontmatter=True):
    d = desc or f"{t['purpose'][0].upper()}{t['purpose'][1:]} ({t['eco']}). Use when {t['trigger']}."
    words = [w.upper() if w in ("sql", "adr", "api", "k8s", "db") else w
             for w in t["slug"].split("-")]
    title = " ".join(words)[0].upper() + " ".join(words)[1:]
    parts = [f"---\nname: {name or t['name']}\ndescription: {yaml_str(d)}\n---" if frontmatter
             else "", f"# {title}"]
    if trigger:
        parts.append(f"## When to use\n{t['trigger'][0].upper()}{t['trigger'][1:]}.")
    parts.append("## Steps\n" + "\n".join(f"{i}. {s}" for i, s in enumerate(steps or t["steps"], 1)))
    if script:
        parts.append(f"Helper: `scripts/{script[0]}` automates steps 1–2.")
    if verify:
        parts.append(f"## Verify\nDone when {t['verify']}.")
    if pitfalls:
        parts.append(f"## Pitfalls\n- {t['pitfall'][0].upper()}{t['pitfall'][1:]}.")
    return "\n\n".join(p for p in parts if p)


def script_for(c, t):
    first = next((s.split("`")[1] for s in t["steps"] if s.count("`") >= 2), None)
    if not first or "<" in first or first.startswith("for "):
        return None
    note = c.pick(["runs step 1 and prints a JSON status line", "step one, reported as one "
                   "line of JSON", "first step with a machine-readable result"])
    return (f"{t['slug']}.sh", f"#!/usr/bin/env bash\n# {t['slug']} ({t['eco']}): {note}."
            f"\nset -euo pipefail\n\nif {first}; then\n"
            f"  echo '{{\"skill\": \"{t['slug']}\", \"step\": 1, \"ok\": true}}'\nelse\n"
            f"  echo '{{\"skill\": \"{t['slug']}\", \"step\": 1, \"ok\": false}}'\n  exit 1\nfi")


def answer(c, md, script=None):
    return join(c.prose(c.pick(["`SKILL.md`:", "Here is the skill:", "The skill file:"])),
                fence("markdown", md),
                f"`scripts/{script[0]}`:\n{fence('bash', script[1])}" if script else "")


def frontmatter_only(c):
    t = topic(c)
    md = skill_md(t, trigger=False, verify=False, pitfalls=False, steps=t["steps"][:1])
    user = c.pick([f"Just the front matter and a first step for a skill that {t['purpose']} "
                   f"({t['eco']}).", f"Start a skill that {t['purpose']}: name, description, "
                   f"step one.", f"Skeleton SKILL.md for '{t['purpose']}' in {t['eco']}."])
    return record([msg("system", c.choice(SYSTEM)), msg("user", user),
                   msg("assistant", answer(c, md))], c.choice([1, 2]), "warmup", "frontmatter")


def basic(c):
    t = topic(c)
    full = c.chance(0.5)
    md = skill_md(t, pitfalls=full, verify=True)
    return record([msg("system", c.choice(SYSTEM)), msg("user", ask(c, t)),
                   msg("assistant", answer(c, md))], 3 + full, "syntax", "skill_basic")


def with_script(c):
    t = topic(c)
    sc = script_for(c, t)
    if not sc:
        return basic(c)
    return record([msg("system", c.choice(SYSTEM)), msg("user", ask(c, t) + " Add a helper "
                                                        "script for the first step."),
                   msg("assistant", answer(c, skill_md(t, script=sc), sc))], c.choice([5, 6]),
                  "reasoning", "skill_with_script")


def revise(c):
    t = topic(c)
    vague = f"{t['purpose'][0].upper()}{t['purpose'][1:]}."
    first = skill_md(t, desc=vague, trigger=False, pitfalls=False)
    msgs = [msg("system", c.choice(SYSTEM)), msg("user", ask(c, t)),
            msg("assistant", answer(c, first)),
            msg("user", c.pick(["The agent never picks this skill up on its own. Why, and can "
                                "you fix it?", "Reviewers say the description doesn't say when "
                                "to use it. Please revise.", "It isn't triggering when it "
                                "should; improve the description and add pitfalls."])),
            msg("assistant", join(c.prose(c.pick([
                "The description is what the agent matches against, and it only said what the "
                "skill does. It now says when to use it, and pitfalls are listed.",
                "Agents load skills by their description; this one named the task but no "
                "trigger. Added the trigger and a pitfalls section.", "Without a 'use when' "
                "clause the skill is invisible at decision time — fixed, plus pitfalls."])),
                                  fence("markdown", skill_md(t))))]
    return record(msgs, c.choice([7, 8]), "multi_turn", "skill_revise")


def suite(c):
    ts = [topic(c) for _ in range(3)]
    if len({t["slug"] for t in ts}) < 3:
        return suite(c)
    name = c.pick(["release-day", "pre-merge-gate", "weekly-hygiene", "launch-checklist",
                   "handoff-ready", "ship-it", "quality-sweep", "cut-release", "sanity-pass"])
    steps = [f"Run the `{t['name']}` skill; stop if it is not done ({t['verify']})." for t in ts]
    md = (f"---\nname: {name}\ndescription: {yaml_str(f'Runs {len(ts)} skills in order - ' + ', '.join(t['name'] for t in ts) + f'. Use when preparing a {name.replace(chr(45), chr(32))}.')}\n---\n\n"
          f"# {name.replace('-', ' ').capitalize()}\n\n## Steps\n" +
          "\n".join(f"{i}. {s}" for i, s in enumerate(steps, 1)) +
          "\n\n## Verify\n" + c.pick(["All three sub-skills report done; otherwise report which "
                                   "step stopped and why.", "Done only when every step passed "
                                   "its own check; else name the step that failed.",
                                   "Report each sub-skill's result; any failure means not done."]))
    if c.chance(0.3):         # self-contained variant: each sub-skill's steps inlined
        md += "\n\n## Sub-skill reference\n\n" + "\n\n".join(
            skill_md(t, frontmatter=False).replace("# ", "### ", 1).replace("## ", "#### ")
            for t in ts)
    user = c.pick([f"Compose a `{name}` skill that chains {', '.join(t['name'] for t in ts)}.",
                   f"One skill, {name}, running these in order: {', '.join(t['name'] for t in ts)}."])
    return record([msg("system", c.choice(SYSTEM)), msg("user", user),
                   msg("assistant", join(c.prose(c.pick([
                       "Each step gates the next on the sub-skill's own verification, so a "
                       "failure stops the chain early.", "The chain stops at the first "
                       "sub-skill whose check fails, and says which.", "Order matters and every "
                       "link is verified before the next starts."])), fence("markdown", md)))],
                  9, "orchestration", "skill_suite")


TOOLS = "<tools>\n" + "\n".join(jdump(t) for t in [
    {"name": "list_dir", "description": "List a directory.", "parameters": {"type": "object",
     "properties": {"path": {"type": "string"}}, "required": ["path"]}},
    {"name": "read_file", "description": "Read a file.", "parameters": {"type": "object",
     "properties": {"path": {"type": "string"}}, "required": ["path"]}},
    {"name": "write_file", "description": "Write a file.", "parameters": {"type": "object",
     "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
     "required": ["path", "content"]}}]) + "\n</tools>"


def agentic(c):
    t, other = topic(c), topic(c)
    if t["slug"] == other["slug"]:
        return agentic(c)
    md = skill_md(t)
    call = lambda n, **a: f"<tool_call>\n{jdump({'name': n, 'arguments': a})}\n</tool_call>"
    msgs = [msg("system", c.choice(SYSTEM) + "\n\n" + TOOLS), msg("user", ask(c, t) +
                                                                 " Match our existing skills."),
            msg("assistant", call("list_dir", path="skills")),
            msg("tool", f"{other['name']}/\n"),
            msg("assistant", call("read_file", path=f"skills/{other['name']}/SKILL.md")),
            msg("tool", skill_md(other)),
            msg("assistant", c.pick([
                "Existing skills use When to use / Steps / Verify / Pitfalls; following that.",
                f"`{other['name']}` sets the house layout (trigger, numbered steps, a check, "
                f"pitfalls); the new skill mirrors it.", "Matching the existing sections and "
                "their order."]) + "\n" + call("write_file", path=f"skills/{t['name']}"
                                                        f"/SKILL.md", content=md)),
            msg("tool", "ok"),
            msg("assistant", join(f"Wrote `skills/{t['name']}/SKILL.md`, in the same layout as "
                                  f"`{other['name']}`:", fence("markdown", md)))]
    return record(msgs, 10, "agentic", "skill_agentic")


FLAWS = {
    "no_frontmatter": (2, "has no YAML front matter, so it can never be discovered"),
    "bad_yaml": (3, "front matter does not parse: the unquoted `: ` in the description"),
    "bad_name": (3, "`name` must be kebab-case"),
    "vague": (5, "the description is too vague to trigger on"),
    "no_trigger": (6, "it never says when to use the skill"),
    "no_verify": (6, "nothing tells the agent how to know it is done"),
    "dangerous": (7, "a step is destructive without confirmation"),
}


def flawed(c, t, flaw):
    if flaw == "no_frontmatter":
        return skill_md(t, frontmatter=False)
    if flaw == "bad_yaml":
        return skill_md(t).replace(f"description: {yaml_str(skill_md_desc(t))}",
                                   f"description: Use when: {t['trigger']}")
    if flaw == "bad_name":
        return skill_md(t, name=t["slug"].replace("-", " ").title())
    if flaw == "vague":
        return skill_md(t, desc=c.choice(["Helps with the repo.", "Useful skill.",
                                          "Does the thing.", "Misc tasks."]))
    if flaw == "no_trigger":
        return skill_md(t, desc=f"{t['purpose'][0].upper()}{t['purpose'][1:]}.", trigger=False)
    if flaw == "no_verify":
        return skill_md(t, verify=False, pitfalls=False)
    return skill_md(t, steps=t["steps"] + [c.pick(["Clean up with `rm -rf ./*` before "
                                                   "finishing.", "Push the result with "
                                                   "`git push --force`.", "Run `git reset "
                                                   "--hard origin/main` to start clean."])])


def skill_md_desc(t):
    return f"{t['purpose'][0].upper()}{t['purpose'][1:]} ({t['eco']}). Use when {t['trigger']}."


def preference(c):
    t = topic(c)
    flaw = c.choice(sorted(FLAWS))
    d, _ = FLAWS[flaw]
    prompt = [msg("system", c.choice(SYSTEM)), msg("user", ask(c, t))]
    good = answer(c, skill_md(t))
    bad = answer(c, flawed(c, t, flaw))
    if c.chance(0.25):                  # harder: the prompt holds a draft with this flaw
        prompt += [msg("assistant", bad), msg("user", c.pick([
            "Please review that draft and fix whatever would stop an agent using it well.",
            "Something is off with this skill; fix it.", "Review and correct the draft."]))]
        return pair(prompt, good, bad, min(10, d + 3), "multi_turn" if d + 3 <= 9 else "agentic",
                    f"pair_review_{flaw}")
    return pair(prompt, good, bad, d, "warmup" if d <= 2 else "syntax" if d <= 4 else
                "reasoning", f"pair_{flaw}")


SOURCES = {
    "skills": [(1.5, frontmatter_only), (3, basic), (2, with_script), (1.5, revise),
               (1, suite), (1, agentic)],
    "skill_pairs": [(1, preference)],
}
