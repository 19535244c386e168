"""Admission oracles (mens.synth.oracle): for every check a passing record, a failing one whose
diagnostics locate the problem, one that times out on a pathological input (the child is
stopped, the verdict is a failure saying so), and the unverified case (the oracle cannot run:
its tool is not on PATH, or the child cannot even start). Also: what the sandbox enforces,
memory blow-ups, a batch that survives one bad record, and the linear fence scanner."""
from __future__ import annotations

import json
import random
import re
import shutil
import time

import pytest

from mens.synth import oracle
from mens.synth.oracle import Verdict, isolation, judge, judge_batch
from mens.synth.oracle_checks import fences
from mens.errors import ConfigError

HAS_CARGO = oracle.find_cargo(None) is not None
HAS_BASH = shutil.which("bash") is not None


def sft(*turns, system=None):
    msgs = ([{"role": "system", "content": system}] if system else []) + [
        {"role": role, "content": content} for role, content in turns]
    return {"messages": msgs}


def answer(lang, body, *more):
    return sft(("user", "task"), ("assistant", "".join(f"```{la}\n{b}\n```\n" for la, b in
                                                       [(lang, body), *more])))


TOOLS = ('<tools>\n{"name": "convert_currency", "parameters": {"type": "object", "properties": '
         '{"amount": {"type": "number", "minimum": 0}, "from": {"type": "string", "pattern": '
         '"^[A-Z]{3}$"}, "to": {"type": "string", "pattern": "^[A-Z]{3}$"}}, "required": '
         '["amount", "from", "to"], "additionalProperties": false}}\n'
         '{"name": "order", "parameters": {"type": "object", "properties": {"items": {"type": '
         '"array", "items": {"type": "object", "properties": {"qty": {"type": "integer", '
         '"minimum": 1}}, "required": ["qty"]}}}, "required": ["items"]}}\n'
         '{"name": "slow", "parameters": {"type": "object", "properties": {"s": {"type": '
         '"string", "pattern": "^(a+)+$"}}}}\n</tools>')
CALL = '<tool_call>\n{"name": "%s", "arguments": %s}\n</tool_call>'
MESH = '{"id": "%s", "sender": "orchestrator", "recipients": ["coder"], "reply_to": %s}'
SKILL = "---\nname: %s\ndescription: %s\n---\n\n# Title\n"
RUST_GOOD = "pub fn total(v: &[u32]) -> u32 {\n    v.iter().sum()\n}"
RUST_MOVED = ("pub fn f() -> usize {\n    let s = String::new();\n    let t = s;\n"
              "    s.len() + t.len()\n}")
# The lint that stops runaway const evaluation, allowed: rustc would evaluate until killed.
RUST_LOOP = ("#![allow(long_running_const_eval)]\npub const X: u64 = { let mut i: u64 = 0; "
             "while i < u64::MAX { i += 1; } i };")


def chain(n):           # a reply_to chain n long: checking it for loops is quadratic in n
    msgs = ",".join(MESH % (f"o{k}", f'"o{k - 1}"' if k else "null") for k in range(n))
    return sft(("user", "go"), ("assistant", f"```json\n[{msgs}]\n```"))


# check: (passing record, failing record, [substrings its diagnostics must hold],
#         a function making a pathological record, timeout_s for it)
CASES = {
    "vox_parses": (
        answer("vox", "fn total(xs) {\n  let t = 0;\n  for x in xs {\n    t = t + x;\n  }\n"
                      "  return t;\n}\nprint(str(total([1, 2])));"),
        answer("vox", "let t = 0;\nprint(t);", ("vox", "let t = 0\nprint(t);")),
        ["vox block 2: error[V003] 2:1: expected `;`"],
        lambda: answer("vox", "let t = 0;\n" + "t = t + 1;\n" * 300_000), 0.5),
    "python_parses": (
        answer("python", "def double(x):\n    return x * 2"),
        answer("python", "import os\n\ndef double(x)\n    return x * 2"),
        ["python block 1: line 3, column 14: expected ':'", "def double(x)"],
        lambda: answer("python", "x = 1\n" * 300_000), 0.3),
    "shell_syntax": (
        answer("bash", "jq -r '.[] | .name' users.json | sort -u"),
        answer("bash", "echo ok", ("sh", 'for f in *.log; do\n  gzip -- "$f"')),
        ["block2.sh: line 3: syntax error: unexpected end of file"],
        lambda: answer("bash", "echo x\n" * 3_000_000), 0.5),
    "rust_compiles": (
        answer("rust", RUST_GOOD, ("toml", '[workspace]\nmembers = ["a"]')),
        answer("rust", RUST_MOVED, ("toml", "[workspace\nmembers = 1")),
        ["error[E0382]: borrow of moved value: `s`", "--> block1.rs:4:5",
         "toml block 1: ", "(at line 1, column 11)"],
        lambda: answer("rust", RUST_LOOP), 3.0),
    "tool_call_schema": (
        sft(("user", "10 EUR in USD?"), ("assistant", CALL % (
            "convert_currency", '{"amount": 10, "from": "EUR", "to": "USD"}')), system=TOOLS),
        sft(("user", "order"), ("assistant", CALL % ("convert_currency", '{"amount": "10", '
                                                     '"from": "eur", "to": "USD"}') +
                                CALL % ("order", '{"items": [{"qty": 2}, {"qty": 0}]}') +
                                CALL % ("weather", "{}")), system=TOOLS),
        ["call 1 `convert_currency` arguments $.amount: '10' is not of type 'number'",
         "$.from: 'eur' does not match '^[A-Z]{3}$'",
         "call 2 `order` arguments $.items[1].qty: 0 is less than the minimum of 1",
         "call 3 `weather`: no such tool in <tools>"],
        lambda: sft(("user", "s"), ("assistant", CALL % ("slow", '{"s": "%sb"}' % ("a" * 40))),
                    system=TOOLS), 1.0),
    "transcript_structure": (
        sft(("user", "run tests"), ("assistant", CALL % ("run", "{}")), ("tool", "3 passed"),
            ("assistant", "All 3 pass.")),
        sft(("user", "run tests"), ("assistant", CALL % ("run", "{}")), ("user", "well?"),
            ("assistant", "All 3 pass.")),
        ["message 3 (user): expected a tool result, 1 call(s)"],
        lambda: sft(("user", "x"), ("assistant", "<tool_call>" * 20_000)), 1.0),
    "mesh_messages": (
        sft(("user", "```json\n" + MESH % ("m1", "null") + "\n```"),
            ("assistant", "```json\n" + MESH % ("o2", '"m1"') + "\n```")),
        sft(("user", "```json\n" + MESH % ("m1", "null") + "\n```"),
            ("assistant", "```json\n" + MESH % ("o2", '"m7"') + "\n```")),
        ["message 2: `o2` replies to `m7`, which no earlier message has"],
        lambda: chain(20_000), 1.0),
    "skill_frontmatter": (
        answer("markdown", SKILL % ("release-notes", "Drafts release notes.")),
        answer("markdown", SKILL % ("release-notes", "Use when: a release is cut.")),
        ["mapping values are not allowed here", "in SKILL.md, line 3, column 22"],
        lambda: answer("markdown", (SKILL % ("big", "x")).replace(
            "---\n\n", "items:\n" + "  - {a: 1, b: [1, 2, 3]}\n" * 60_000 + "---\n\n")), 1.0),
}


def needs(check):
    if check == "rust_compiles" and not HAS_CARGO:
        pytest.skip("cargo not installed here: rust_compiles reports None (unverified)")
    if check == "shell_syntax" and not HAS_BASH:
        pytest.skip("bash not installed here: shell_syntax reports None (unverified)")


@pytest.mark.parametrize("check", sorted(CASES))
def test_pass_and_fail_with_located_diagnostics(check):
    needs(check)
    good, bad, expect, *_ = CASES[check]
    g, b = judge_batch(check, [good, bad])
    assert g == Verdict(True, "", check, None)
    assert b.passed is False and b.unverified_reason is None
    for text in expect:
        assert text in b.diagnostics, b.diagnostics


@pytest.mark.parametrize("check", sorted(CASES))
def test_pathological_input_times_out_as_a_failure(check):
    needs(check)
    *_, slow, timeout_s = CASES[check]
    t = time.monotonic()
    v = judge(check, slow(), timeout_s=timeout_s)
    took = time.monotonic() - t
    assert v.passed is False and "timed out after" in v.diagnostics, v
    assert took < timeout_s + 15, took     # stopped, not run to the end (that takes minutes)


def test_a_batch_survives_its_timeouts_and_keeps_the_rest():
    good, bad, _, slow, _ = CASES["mesh_messages"]
    vs = judge_batch("mesh_messages", [good, slow(), bad, slow(), good], timeout_s=1.0)
    assert [v.passed for v in vs] == [True, False, False, False, True]
    assert "timed out" in vs[1].diagnostics and "replies to `m7`" in vs[2].diagnostics


@pytest.mark.skipif(not HAS_BASH, reason="needs bash")
def test_shell_batch_resumes_after_a_stuck_block():
    good, bad, _, slow, _ = CASES["shell_syntax"]
    vs = judge_batch("shell_syntax", [good, slow(), bad, good], timeout_s=0.5)
    assert [v.passed for v in vs] == [True, False, False, True]
    assert "block1.sh: timed out" in vs[1].diagnostics
    assert "block2.sh: line 3" in vs[2].diagnostics


@pytest.mark.skipif(not HAS_CARGO, reason="needs cargo")
def test_rust_crate_that_hangs_is_split_per_record():
    """One scratch crate for the batch; when it times out each record is checked alone, so the
    good and the plainly bad ones get their own verdicts and diagnostics."""
    good, bad, _, slow, t = CASES["rust_compiles"]
    vs = judge_batch("rust_compiles", [good, slow(), bad], timeout_s=t)
    assert [v.passed for v in vs] == [True, False, False]
    assert "timed out" in vs[1].diagnostics and "E0382" in vs[2].diagnostics


def test_memory_blowup_is_a_failed_verdict():
    big = answer("python", "x = [" + "1," * 2_000_000 + "]")       # ast.parse: ~2 GB
    v = judge("python_parses", big, memory_mb=300)
    assert v.passed is False and "memory limit" in v.diagnostics and "300 MB" in v.diagnostics


# ------------------------------------------------------------------ unverified
@pytest.mark.parametrize("check", ["shell_syntax", "rust_compiles"])
def test_missing_tool_is_unverified_not_passed(check, tmp_path):
    good, bad, *_ = CASES[check]
    empty = answer("text", "no code")
    v, w, e = judge_batch(check, [good, bad, empty], path=str(tmp_path))   # a PATH without it
    assert v.passed is None and v.unverified_reason.split()[0] in ("bash", "cargo")
    assert e.passed is False and "no ```" in e.diagnostics      # nothing to check: no evidence
    if check == "rust_compiles":     # the toml part needs no cargo: still judged, still failed
        assert w.passed is False and "toml block 1" in w.diagnostics
        toml_only = answer("toml", '[workspace]\nmembers = ["a"]')
        assert judge(check, toml_only, path=str(tmp_path)).passed is True


@pytest.mark.parametrize("check", sorted(set(CASES) - {"shell_syntax", "rust_compiles"}))
def test_checker_that_cannot_start_is_unverified(check):
    """The pure-Python checks' tool is the interpreter itself: it is never missing, but a child
    that cannot start (here: 8 MB of address space) must not count as pass or fail."""
    v = judge(check, CASES[check][0], memory_mb=8)
    assert v.passed is None and v.unverified_reason.startswith("the checker did not start")


# ------------------------------------------------------------------ the sandbox itself
def test_children_get_limits_no_secrets_and_no_network(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    lim = oracle.Limits(timeout_s=7, memory_mb=321, path=None)
    probe = "env; echo AS=$(ulimit -v) CPU=$(ulimit -t) CORE=$(ulimit -c); cat /proc/net/dev"
    proc = oracle._popen([*oracle._unshare(), "sh", "-c", probe], str(tmp_path), lim, (8, 8),
                         stdout=oracle.subprocess.PIPE, text=True)
    out = proc.communicate(timeout=30)[0]
    assert "sk-must-not-leak" not in out and "proxy.invalid" not in out
    assert f"AS={321 * 1024} CPU=8 CORE=0" in out
    ifaces = re.findall(r"^\s*(\w+):", out, re.M)
    if oracle._unshare():            # the namespace works here: only a loopback is inside
        assert ifaces == ["lo"] and "own network namespace" in isolation()["network"]
    else:
        assert "not isolated" in isolation()["network"]


def test_unknown_check_is_a_config_error():
    with pytest.raises(ConfigError, match="spoke.admission.check"):
        judge("compiles_somehow", CASES["vox_parses"][0])


def test_long_diagnostic_lines_are_clipped():
    v = judge("shell_syntax", answer("bash", "echo " + "x" * 20_000 + " )"))
    assert v.passed is False and len(v.diagnostics) < 1000 and "more chars" in v.diagnostics


def test_fences_equal_the_regex_and_stay_linear():
    regex = re.compile(r"```([\w+-]*)[^\n]*\n(.*?)```", re.S)
    rng = random.Random(0)
    parts = ["```", "```py", "```bash x", "\n", "a", "`", "``", " ", "\n```\n"]
    for _ in range(3000):
        text = "".join(rng.choice(parts) for _ in range(rng.randint(0, 30)))
        assert fences(text) == regex.findall(text), text
    t = time.monotonic()
    assert fences("```" * 200_000) == []       # the regex needs minutes on this line
    assert time.monotonic() - t < 1.0


def test_a_tool_schema_that_is_itself_invalid_is_named():
    tools = '<tools>\n{"name": "t", "parameters": {"type": "objekt"}}\n</tools>'
    rec = sft(("user", "x"), ("assistant", CALL % ("t", "{}")), system=tools)
    v = judge("tool_call_schema", rec)
    assert v.passed is False and "the schema itself is invalid at type" in v.diagnostics


@pytest.mark.parametrize("check, lang", [("vox_parses", "vox"), ("python_parses", "python"),
                                         ("shell_syntax", "bash")])
def test_empty_fences_prove_nothing(check, lang):
    """A model in a loop writes fences with nothing inside: an empty program parses under every
    grammar, so it fails (seen: a tiny vox_lang adapter answering ```vox\\n```vox\\n… passed)."""
    needs(check)
    looped = answer(lang, "", (lang, "   "))
    [v] = judge_batch(check, [looped])
    assert v.passed is False and f"{lang} block 1: empty (no code)" in v.diagnostics
    assert f"{lang} block 2: empty" in v.diagnostics


# ------------------------------------------------------------------ tool use as structure (#38)
SCHEMAS = [{"type": "function", "function": {"name": "convert_currency", "parameters": {
    "type": "object", "properties": {"amount": {"type": "number", "minimum": 0},
                                     "from": {"type": "string", "pattern": "^[A-Z]{3}$"},
                                     "to": {"type": "string", "pattern": "^[A-Z]{3}$"}},
    "required": ["amount", "from", "to"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "run", "parameters": {
        "type": "object", "properties": {"command": {"type": "string"}}}}}]
ARGS = {"amount": 10, "from": "EUR", "to": "USD"}


def called(*calls, content=""):
    """An assistant turn calling (name, arguments, id) each."""
    return {"role": "assistant", "content": content, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
        for n, a, i in calls]}


def tooled(*msgs):
    return {"messages": [{"role": "system", "content": "Convert money."},
                         {"role": "user", "content": "10 EUR in USD?"}, *msgs],
            "tools": SCHEMAS}


def result(call_id, name, content="ok"):
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}


def test_structured_calls_are_judged_against_the_records_tools():
    """The record's `tools` declare, its `tool_calls` call: each call's name must be declared and
    its arguments valid against the schema; arguments given as a JSON string are read (OpenAI's
    wire form), one that is not JSON is named."""
    good = tooled(called(("convert_currency", ARGS, "a1"), ("run", {"command": "ls"}, "b2"),
                         content="Both."),
                  result("a1", "convert_currency"), result("b2", "run"),
                  {"role": "assistant", "content": "10.8 USD."})
    wire = tooled(called(("convert_currency", json.dumps(ARGS), "a1")))
    bad = tooled(called(("convert_currency", {**ARGS, "amount": "10"}, "a1"),
                        ("weather", {}, "b2")))
    broken = tooled(called(("convert_currency", '{"amount": 10,', "a1")))
    none = tooled({"role": "assistant", "content": "10.8 USD, from memory."})
    g, w, b, x, n = judge_batch("tool_call_schema", [good, wire, bad, broken, none])
    assert g.passed is True and w.passed is True
    assert b.passed is False and "call 1 `convert_currency` arguments $.amount: '10' is not " \
        "of type 'number'" in b.diagnostics and "call 2 `weather`: no such tool" in b.diagnostics
    assert x.passed is False and "tool_calls[0].function.arguments` is not valid JSON" in \
        x.diagnostics
    assert n.passed is False and "no tool call in the answer" in n.diagnostics


def test_structured_results_must_answer_their_calls():
    """A result answers an open call of the turn before it: by `tool_call_id`, else by `name`
    (in any order); one naming no open call, or one call too few answered, fails."""
    calls = called(("convert_currency", ARGS, "a1"), ("run", {"command": "ls"}, "b2"))
    done = {"role": "assistant", "content": "Done."}
    good = tooled(calls, result("b2", "run"), result("a1", "convert_currency"), done)
    by_name = tooled(calls, {"role": "tool", "name": "run", "content": "x"},
                     {"role": "tool", "name": "convert_currency", "content": "y"}, done)
    wrong_id = tooled(calls, result("a1", "convert_currency"), result("zz", "run"), done)
    wrong_name = tooled(calls, result("a1", "convert_currency"),
                        {"role": "tool", "name": "convert_currency", "content": "again"}, done)
    short = tooled(calls, result("a1", "convert_currency"), done)
    vs = judge_batch("transcript_structure", [good, by_name, wrong_id, wrong_name, short])
    assert [v.passed for v in vs] == [True, True, False, False, False]
    assert "message 5 (tool): its tool_call_id 'zz' answers none of the open calls (run)" in \
        vs[2].diagnostics
    assert "its name 'convert_currency' answers none of the open calls (run)" in vs[3].diagnostics
    assert "message 5 (assistant): expected a tool result, 1 call(s)" in vs[4].diagnostics


CALLED = {"hermes": '<tool_call>\n{"name": "convert_currency", "arguments": %s}\n</tool_call>',
          "llama3": '{"name": "convert_currency", "parameters": %s}',
          "mistral": '[TOOL_CALLS] [{"name": "convert_currency", "arguments": %s}]'}


@pytest.mark.parametrize("syntax", sorted(CALLED))
def test_a_models_answer_is_read_in_the_runs_syntax(syntax):
    """oracle_record(…, syntax) hands the answer to the check as text marked with the model's
    syntax; the child reads the calls out (mens.data.tool_syntax) and judges them against the
    record's tools. The same call in another family's syntax is no call; a call that does not
    parse is a failure saying so."""
    from mens.synth.oracle_checks import oracle_record

    rec = tooled(called(("convert_currency", ARGS, "a1")), result("a1", "convert_currency"),
                 {"role": "assistant", "content": "10.8 USD."})
    head = rec["messages"][:2]
    ok, wrong = (CALLED[syntax] % json.dumps(a) for a in (ARGS, {**ARGS, "to": "usd"}))
    other = "llama3" if syntax != "llama3" else "hermes"
    answers = [(ok, syntax), (wrong, syntax), (ok, other), (ok[:-3], syntax)]
    recs = [oracle_record(rec, head, t, "tool_call_schema", s) for t, s in answers]
    assert all(r["tools"] == SCHEMAS and r["messages"][-1]["tool_syntax"] == s
               for r, (_, s) in zip(recs, answers))
    good, bad, foreign, cut = judge_batch("tool_call_schema", recs)
    assert good.passed is True
    assert bad.passed is False and "$.to: 'usd' does not match" in bad.diagnostics
    assert foreign.passed is False and "no tool call in the answer" in foreign.diagnostics
    assert cut.passed is False and ("does not parse" in cut.diagnostics
                                    or "not closed" in cut.diagnostics), cut.diagnostics
    # a transcript: a final answer closes it, a call leaves it waiting for its result
    final, calling = (oracle_record(rec, head, t, "transcript_structure", syntax)
                      for t in ("10.8 USD.", ok))
    f, c = judge_batch("transcript_structure", [final, calling])
    assert f.passed is True and c.passed is False and "expecting a tool result" in c.diagnostics
