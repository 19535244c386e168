"""The eight spokes' corpora (mens/assets/corpora/, made by tools/make_corpus.py): size, schema,
curriculum spread, ratings, admission (each check on real good and bad inputs, and the stored
`verified` re-derived), loader errors, the mix rule, determinism and the held-out property.
The tool spokes keep tool use as structure (issue #38): rendered by the tiny rung's template they
are, token for token, the text corpus they were; a user's record that writes calls as text
still trains exactly as before."""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from mens.synth.admission import CHECKS, check_all
from mens.data import tools as T
from mens.data.corpus import (CHATML, DATA_DIR, PHASES, DataError, corpus_texts, load_eval,
                              load_jsonl, load_spoke, render)

ROOT = Path(__file__).resolve().parents[2]
SPOKES = sorted(p.stem for p in (ROOT / "conf" / "spoke").glob("*.yaml"))
KEYS = ["id", "spoke", "source", "messages", "difficulty", "phase", "rating", "split",
        "provenance", "verified"]
PAIR_KEYS = ["id", "spoke", "source", "prompt", "chosen", "rejected", "difficulty", "phase",
             "rating", "split", "provenance", "verified"]
TOOL_SPOKES = ("agent_harness", "mcp_tool_chain")     # records carry `tools` after `messages`
TOOL_KEYS = KEYS[:4] + ["tools"] + KEYS[4:]
TINY = ROOT / "mens" / "assets" / "tiny"
NGRAM = 12


def cfg(spoke: str) -> dict:
    return yaml.safe_load((ROOT / "conf" / "spoke" / f"{spoke}.yaml").read_text())


def train_records(spoke: str) -> list[dict]:
    return [r for s in cfg(spoke)["sources"] for r in load_jsonl(DATA_DIR / spoke / s["path"])]


def eval_records(spoke: str) -> list[dict]:
    files = [DATA_DIR / spoke / "eval.jsonl", DATA_DIR / spoke / "eval_pairs.jsonl"]
    return [r for f in files if f.exists() for r in load_jsonl(f)]


# ------------------------------------------------------------------ size, schema, spread
@pytest.mark.parametrize("spoke", SPOKES)
def test_size_and_schema(spoke):
    c = cfg(spoke)
    train, evals = train_records(spoke), eval_records(spoke)
    assert len(train) >= 250 and len([r for r in evals if "messages" in r]) >= 30
    if any(s.get("kind") == "preference" for s in c["sources"]):
        assert len([r for r in evals if "prompt" in r]) >= 15
    ids = [r["id"] for r in train + evals]
    assert len(ids) == len(set(ids)), "ids must be unique within a spoke"
    for s in c["sources"]:
        for r in load_jsonl(DATA_DIR / spoke / s["path"]):
            assert list(r) == (PAIR_KEYS if s.get("kind") == "preference" else
                               TOOL_KEYS if spoke in TOOL_SPOKES else KEYS)
            assert (r["spoke"], r["source"], r["split"]) == (spoke, s["name"], ["train"])
            assert r["id"].startswith(f"{spoke}-{s['name']}-")
            assert r["provenance"]["origin"] == "tools/make_corpus.py"
    assert all("eval" in r["split"] for r in evals)


@pytest.mark.parametrize("spoke", SPOKES)
def test_difficulty_spread_and_curriculum_growth(spoke):
    recs = train_records(spoke)
    d = [r["difficulty"] for r in recs]
    assert min(d) == 1 and max(d) == 10
    caps = yaml.safe_load((ROOT / "conf" / "curriculum" / "three_epoch.yaml").read_text())["caps"]
    admitted = [sum(x <= cap for x in d) for cap in caps]
    for before, after in zip(admitted, admitted[1:]):
        assert after >= 1.25 * before, (spoke, admitted)
    by_phase = {p: statistics.mean(r["difficulty"] for r in recs if r["phase"] == p)
                for p in PHASES if any(r["phase"] == p for r in recs)}
    means = list(by_phase.values())
    assert means == sorted(means), f"{spoke}: phase means not rising: {by_phase}"
    assert len(by_phase) >= 5


@pytest.mark.parametrize("spoke", SPOKES)
def test_min_rating_filter_drops_and_counts(spoke):
    c, recs = cfg(spoke), train_records(spoke)
    below = sum(r["rating"] < c["min_rating"] for r in recs)
    assert 0.04 * len(recs) <= below <= 0.12 * len(recs)
    out, stats = load_spoke(c)
    assert stats["below_min_rating"] == below and stats["read"] == len(recs)
    assert all(r["rating"] >= c["min_rating"] for r in out)
    assert stats["unverified"] == sum(r["verified"] is None for r in recs)


def test_manifest_matches_files():
    for spoke in SPOKES:
        m = json.loads((DATA_DIR / spoke / "manifest.json").read_text())
        for name, n in m["files"].items():
            assert len(load_jsonl(DATA_DIR / spoke / name)) == n
        recs = train_records(spoke)
        assert m["counts"]["train"]["total"] == len(recs)
        assert m["counts"]["train"]["by_phase"] == dict(sorted(Counter(r["phase"] for r in recs).items()))
        assert m["rating"]["below_min_rating"]["train"] == sum(
            r["rating"] < m["rating"]["min_rating"] for r in recs)
        a = m["admission"]
        assert a["passed"] + a["unverified"] == len(recs) + len(eval_records(spoke))
        assert m["p99_chars"] == m["chars"]["train"]["p99"] <= m["chars"]["train"]["max"]
        if all("messages" in r for r in recs):          # nearest-rank, as the generator
            chars = sorted(len(render(r)) for r in recs)
            assert m["chars"]["train"]["p50"] == chars[math.ceil(0.5 * len(chars)) - 1]
            assert m["chars"]["train"]["max"] == chars[-1]


# ------------------------------------------------------------------ admission checks
def sft(*turns, system=None):
    msgs = ([{"role": "system", "content": system}] if system else []) + [
        {"role": role, "content": content} for role, content in turns]
    return {"messages": msgs}


def fence(lang, body):
    return f"```{lang}\n{body}\n```"


TOOLS = ('<tools>\n{"name": "convert_currency", "parameters": {"type": "object", "properties": '
         '{"amount": {"type": "number", "minimum": 0}, "from": {"type": "string", "pattern": '
         '"^[A-Z]{3}$"}, "to": {"type": "string", "pattern": "^[A-Z]{3}$"}}, "required": '
         '["amount", "from", "to"], "additionalProperties": false}}\n</tools>')
CALL = '<tool_call>\n{"name": "convert_currency", "arguments": %s}\n</tool_call>'
MESH = '{"id": "%s", "sender": "orchestrator", "recipients": %s, "reply_to": %s, "kind": "x"}'
SKILL = "---\nname: %s\ndescription: %s\n---\n\n# Title\n\n## Steps\n1. Run it."
CASES = {
    "vox_parses": (
        sft(("user", "sum"), ("assistant", fence("vox", "fn total(xs) {\n  let t = 0;\n  for x in "
                                                        "xs {\n    t = t + x;\n  }\n  return t;\n}\n"
                                                        "print(str(total([1, 2])));"))),
        sft(("user", "sum"), ("assistant", fence("vox", "let t = 0\nprint(t);")))),
    "python_parses": (
        sft(("user", "double"), ("assistant", fence("python", "def double(x):\n    return x * 2"))),
        sft(("user", "double"), ("assistant", fence("python", "def double(x)\n    return x * 2")))),
    "shell_syntax": (
        sft(("user", "names"), ("assistant", fence("bash", "jq -r '.[] | .name' users.json | sort -u"))),
        sft(("user", "loop"), ("assistant", fence("bash", 'for f in *.log; do\n  gzip -- "$f"')))),
    "rust_compiles": (
        sft(("user", "sum"), ("assistant", fence("rust", "pub fn total(v: &[u32]) -> u32 {\n"
                                                         "    v.iter().sum()\n}"))),
        sft(("user", "sum"), ("assistant", fence("rust", "pub fn f() -> usize {\n    let s = "
                                                         "String::new();\n    let t = s;\n    "
                                                         "s.len() + t.len()\n}")))),
    "tool_call_schema": (
        sft(("user", "10 EUR in USD?"),
            ("assistant", CALL % '{"amount": 10, "from": "EUR", "to": "USD"}'), system=TOOLS),
        sft(("user", "10 EUR in USD?"),
            ("assistant", CALL % '{"amount": "10", "from": "EUR", "to": "USD"}'), system=TOOLS)),
    "transcript_structure": (
        sft(("user", "run tests"), ("assistant", CALL % "{}"), ("tool", "3 passed"),
            ("assistant", "All 3 pass.")),
        sft(("user", "run tests"), ("assistant", CALL % "{}"), ("user", "well?"),
            ("assistant", "All 3 pass."))),
    "mesh_messages": (
        sft(("user", fence("json", MESH % ("m1", '["orchestrator"]', "null"))),
            ("assistant", fence("json", MESH % ("o2", '["coder"]', '"m1"')))),
        sft(("user", fence("json", MESH % ("m1", '["orchestrator"]', "null"))),
            ("assistant", fence("json", MESH % ("o2", '["coder"]', '"m7"'))))),
    "skill_frontmatter": (
        sft(("user", "skill"), ("assistant", fence("markdown", SKILL % (
            "release-notes", "Drafts release notes. Use when a release is cut.")))),
        sft(("user", "skill"), ("assistant", fence("markdown", SKILL % (
            "release-notes", "Use when: a release is cut."))))),
}
MORE_BAD = {   # second, different ways to fail, each on a real input
    "tool_call_schema": sft(("user", "weather?"), ("assistant", CALL.replace(
        "convert_currency", "get_weather") % '{"city": "Oslo"}'), system=TOOLS),
    "transcript_structure": sft(("user", "hi"), ("tool", "orphan result"), ("assistant", "ok")),
    "mesh_messages": sft(("user", "go"), ("assistant", fence("json", MESH % ("o1", "[]", "null")))),
    "skill_frontmatter": sft(("user", "skill"), ("assistant", fence("markdown", SKILL % (
        "Release Notes", "Drafts release notes.")))),
    "vox_parses": sft(("user", "x"), ("assistant", fence("vox", "let n = 1;\nfn f() {\n  return n;\n}"))),
    "python_parses": sft(("user", "x"), ("assistant", "def f(): return 1  (no code block)")),
}


def needs(check):
    tool = {"shell_syntax": "bash", "rust_compiles": "cargo"}.get(check)
    if tool and not (shutil.which(tool) or (Path.home() / ".cargo/bin/cargo").exists()):
        pytest.skip(f"{tool} not installed: the check reports None (unverified) here")


@pytest.mark.parametrize("check", sorted(CASES))
def test_admission_check_accepts_good_rejects_bad(check):
    needs(check)
    good, bad = CASES[check]
    extra = [MORE_BAD[check]] if check in MORE_BAD else []
    assert check_all(check, [good, bad, *extra]) == [True, False] + [False] * len(extra)
    assert CHECKS[check](good) is True


def test_rust_without_cargo_is_unverified_not_passed(monkeypatch, tmp_path):
    import mens.synth.admission as adm
    monkeypatch.setattr(adm.shutil, "which", lambda name: None)
    monkeypatch.setattr(adm.Path, "home", classmethod(lambda cls: tmp_path))
    toml_ok = sft(("user", "m"), ("assistant", fence("toml", '[workspace]\nmembers = ["a"]')))
    toml_bad = sft(("user", "m"), ("assistant", fence("toml", "[workspace\nmembers = 1")))
    assert check_all("rust_compiles", [CASES["rust_compiles"][0], toml_ok, toml_bad]) == \
        [None, True, False]


def test_loader_keeps_unverified_and_drops_failed(tmp_path):
    c = cfg("speech_to_code")
    (tmp_path / "speech_to_code").mkdir()
    marks = Counter()
    for s in c["sources"]:
        recs = load_jsonl(DATA_DIR / "speech_to_code" / s["path"])
        for i, r in enumerate(recs):
            if r["rating"] >= c["min_rating"] and i % 10 in (1, 2):
                r["verified"] = None if i % 10 == 1 else False
                marks["unverified" if i % 10 == 1 else "failed"] += 1
        (tmp_path / "speech_to_code" / s["path"]).write_text(
            "".join(json.dumps(r) + "\n" for r in recs))
    out, stats = load_spoke(c, data_dir=tmp_path)
    assert stats["unverified"] == marks["unverified"] > 0
    assert stats["failed_admission"] == marks["failed"] > 0
    assert not any(r["verified"] is False for r in out)
    assert any(r["verified"] is None for r in out)


def test_every_spoke_names_a_known_check():
    assert {cfg(s)["admission"]["check"] for s in SPOKES} <= set(CHECKS)


@pytest.mark.parametrize("spoke", SPOKES)
def test_stored_verified_is_what_the_check_says(spoke):
    """`verified` is re-derived, not trusted: every record of every split is re-checked."""
    check = cfg(spoke)["admission"]["check"]
    needs(check)             # rust: one scratch crate for all 340 records, about a second
    recs = train_records(spoke) + eval_records(spoke)
    assert check_all(check, recs) == [r["verified"] for r in recs]


# ------------------------------------------------------------------ tool use as structure
# The tiny rung's template before issue #38 (tools/tiny_base.py then): ChatML, no tool branch.
OLD_TINY_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def as_text(m: dict) -> str:
    """A message as the corpus wrote it before #38: each call a Hermes block after the content."""
    calls = [f"<tool_call>\n{T.call_text(c)}\n</tool_call>" for c in m.get("tool_calls") or []]
    return "\n".join(([m["content"]] if m["content"] or not calls else []) + calls)


def text_form(rec: dict) -> dict:
    """The record in the text form a user's data (and mens's corpora before #38) has: the schemas
    pasted into the system prompt as a <tools> block, calls in `content`, bare tool turns."""
    lines = "\n".join(json.dumps(t["function"], ensure_ascii=False) for t in rec["tools"])
    msgs = [{"role": m["role"], "content": as_text(m)} for m in rec["messages"]]
    msgs[0]["content"] += f"\n\n<tools>\n{lines}\n</tools>"
    return {"messages": msgs}


@pytest.fixture(scope="module")
def tiny():
    from mens.data.encoder import RunEncoder
    return RunEncoder.load(TINY)


@pytest.mark.parametrize("spoke", TOOL_SPOKES)
def test_tool_spokes_keep_tool_use_as_structure(spoke):
    """The tools in `tools`, every call in `tool_calls` (a 9-character id: Mistral refuses any
    other), every result a tool turn naming its call — and no call syntax or schema block written
    as text anywhere, so no family's template meets another family's syntax."""
    recs, calls = train_records(spoke) + eval_records(spoke), 0
    for r in recs:
        assert r["tools"] and T.normalize_tools(r["tools"]) == r["tools"], r["id"]
        names, msgs = T.tool_names(r["tools"]), r["messages"]
        assert not any(w in m["content"] for m in msgs for w in ("<tool_call>", "<tools>")), r["id"]
        made = [c for m in msgs for c in m.get("tool_calls", [])]
        assert all(re.fullmatch("[0-9a-z]{9}", c["id"]) for c in made)
        assert len({c["id"] for c in made}) == len(made)
        assert all(c["function"]["name"] in names and isinstance(c["function"]["arguments"], dict)
                   for c in made)
        by_id = {c["id"]: c["function"]["name"] for c in made}
        results = [m for m in msgs if m["role"] == "tool"]
        assert sorted(m["tool_call_id"] for m in results) == sorted(by_id), r["id"]
        assert all(by_id[m["tool_call_id"]] == m["name"] for m in results)
        calls += len(made)
    assert calls >= 2 * len(recs)


@pytest.mark.parametrize("spoke", TOOL_SPOKES)
def test_tool_spokes_render_natively_to_the_text_corpus_they_were(spoke, tiny):
    """Through the tiny rung's own template (hermes syntax), every record loses no call (read =
    rendered = supervised) and is — ids and labels — what the pre-#38 encoder
    (mens.data.pack.tokenize_chat) makes of its text form with the schemas in the system turn:
    the calls the model learns are the same tokens, and only answers are supervised."""
    from mens.data.pack import tokenize_chat

    assert tiny.tool_syntax == "hermes"
    # a third of the records (seconds, not tens of seconds); `mens data inspect` counts them all
    for r in (train_records(spoke) + eval_records(spoke))[::3]:
        stats: dict = {}
        ids, labels = tiny.encode(r["messages"], None, stats, r["tools"])
        n = sum(len(m.get("tool_calls") or []) for m in r["messages"])
        assert stats["tool_calls_read"] == stats["tool_calls_rendered"] == n > 0, r["id"]
        assert stats["tool_calls_supervised"] == n and stats["tool_calls_truncated"] == 0
        text = tiny.template.render(r["messages"], tools=r["tools"])
        system = text[len("<|im_start|>system\n"):text.index("<|im_end|>")]
        assert system.startswith(r["messages"][0]["content"] + "\n\n# Tools")
        assert all(json.dumps(t, ensure_ascii=False) in system for t in r["tools"])
        old = [{"role": "system", "content": system}] + [
            {"role": m["role"], "content": as_text(m)} for m in r["messages"][1:]]
        assert text == "".join(CHATML.format(**m) for m in old) == render(r)
        assert (ids, labels) == tokenize_chat(tiny.tok, old), r["id"]


# Each family's template variables and the special tokens it ends turns with (its
# tokenizer_config.json), for the real templates in tests/data/fixtures/templates.
QWEN = ({"eos_token": "<|im_end|>"}, ["<|im_start|>", "<|im_end|>", "<|endoftext|>"])
LLAMA = ({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
         ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
          "<|eom_id|>", "<|python_tag|>"])
FAMILY_TEMPLATES = {"qwen3": QWEN, "qwen2_5": QWEN, "llama3": LLAMA, "llama3_3": LLAMA,
                    "mistral": ({"bos_token": "<s>", "eos_token": "</s>"}, ["<s>", "</s>"])}


@pytest.mark.parametrize("family", sorted(FAMILY_TEMPLATES))
def test_each_family_renders_the_tool_spokes_natively(family):
    """Through each family's own published template (every fifth record of both tool spokes):
    every call reads back out of the rendered text in that family's syntax, none lost. Llama
    3.x's template refuses a turn holding several calls ("This model only supports single
    tool-calls at once!"): such a record is refused loudly, never rendered without its calls."""
    from mens.data.template import ChatTemplate

    variables, tokens = FAMILY_TEMPLATES[family]
    source = (ROOT / "tests/data/fixtures/templates" / f"{family}.jinja").read_text()
    tpl = ChatTemplate(source, variables, tokens, family)
    assert tpl.syntax == {"qwen": "hermes", "llam": "llama3", "mist": "mistral"}[family[:4]]
    rendered = refused = 0
    for r in [r for s in TOOL_SPOKES for r in train_records(s) + eval_records(s)][::5]:
        n = sum(len(m.get("tool_calls") or []) for m in r["messages"])
        parallel = any(len(m.get("tool_calls") or []) > 1 for m in r["messages"])
        if family.startswith("llama") and parallel:
            with pytest.raises(DataError, match="only supports single tool-calls"):
                tpl.render_spans(r["messages"], None, r["tools"])
            refused += 1
            continue
        calls = tpl.render_spans(r["messages"], None, r["tools"]).calls
        assert sum(c[1] for c in calls) == sum(c[2] for c in calls) == n > 0, r["id"]
        rendered += 1
    assert rendered >= 80 and (refused > 0) == family.startswith("llama")


def test_a_users_calls_written_as_text_train_as_text_unchanged(tmp_path, tiny):
    """A user's dataset in the old corpus style (calls as <tool_call> text in `content`, schemas
    in the system prompt, bare tool turns) is read as it is — no tools, no tool_calls — and its
    rendering and labels are byte-identical to what the tiny rung trained before #38: the old
    template's text, pack.tokenize_chat's ids and labels."""
    from mens.data.chat_template import render as render_template
    from mens.data.pack import tokenize_chat
    from mens.data.sources import load_data

    recs = [text_form(r) for r in train_records("mcp_tool_chain")[:120]]
    path = tmp_path / "old_style.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs))
    ds = load_data({"source": "file", "path": str(path), "eval_fraction": 0.1,
                    "decontam_n": 0}, "sft")     # one shared system prompt: no n-gram test
    assert ds.format == "messages" and len(ds.train) + len(ds.eval) == len(recs)
    given = {json.dumps(r["messages"]) for r in recs}
    for r in [*ds.train, *ds.eval]:
        assert "tools" not in r and not any("tool_calls" in m for m in r["messages"])
        assert json.dumps(r["messages"]) in given                  # read exactly as written
        stats: dict = {}
        ids, labels = tiny.encode(r["messages"], None, stats, r.get("tools"))
        assert "tool_calls_read" not in stats                      # text, not calls
        assert tiny.template.render(r["messages"]) == \
            render_template(OLD_TINY_TEMPLATE, r["messages"], {})
        assert (ids, labels) == tokenize_chat(tiny.tok, r["messages"])
        assert tiny.marked(r).count("⟦") == sum(m["role"] == "assistant" for m in r["messages"])


def test_corpus_tool_structure_errors_name_line_and_key(tmp_path):
    good = json.loads((DATA_DIR / "mcp_tool_chain" / "single_calls.jsonl").open().readline())
    undeclared, orphan, string_args = (json.loads(json.dumps(good)) for _ in range(3))
    undeclared["messages"][2]["tool_calls"][0]["function"]["name"] = "launch_rocket"
    orphan["messages"][3]["tool_call_id"] = "zzzzzzzzz"
    string_args["messages"][2]["tool_calls"][0]["function"]["arguments"] = '{"city": "Oslo"}'
    for bad, key, words in ((undeclared, "messages[2].tool_calls[0].function.name",
                             "not in the record's `tools`"),
                            (orphan, "messages[3]", "answers no call"),
                            (string_args, "messages", "OpenAI's form")):
        with pytest.raises(DataError) as e:
            load_jsonl(write(tmp_path, [good, bad]))
        assert (e.value.line, e.value.key) == (2, key) and words in e.value.message, e.value


# ------------------------------------------------------------------ loader errors
GOOD = json.loads((DATA_DIR / "vox_lang" / "grammar_drills.jsonl").open().readline())


def write(tmp_path, lines) -> Path:
    p = tmp_path / "x.jsonl"
    p.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n"
                         for line in lines))
    return p


def test_corrupt_line_names_file_and_line(tmp_path):
    p = write(tmp_path, [GOOD, GOOD, '{"id": "broken", "spoke": '])
    with pytest.raises(DataError) as e:
        load_jsonl(p)
    assert (e.value.path, e.value.line) == (str(p), 3)
    assert f"{p}:3:" in e.value.message and "not valid JSON" in e.value.message


@pytest.mark.parametrize("mutate, key", [
    (lambda r: r.pop("difficulty"), "difficulty"),
    (lambda r: r.update(difficulty=11), "difficulty"),
    (lambda r: r.update(phase="cooldown"), "phase"),
    (lambda r: r["messages"][1].update(role="robot"), "messages"),
    (lambda r: r.update(split=["golden"]), "split"),
])
def test_schema_violation_names_line_and_key(tmp_path, mutate, key):
    bad = json.loads(json.dumps(GOOD))
    mutate(bad)
    p = write(tmp_path, [GOOD, bad])
    with pytest.raises(DataError) as e:
        load_jsonl(p)
    assert e.value.line == 2 and e.value.key == key
    assert f"{p}:2:" in e.value.message and f"`{key}" in e.value.message


def test_filter_that_empties_the_spoke_is_named():
    strict = {**cfg("speech_to_code"), "min_rating": 5.01}
    with pytest.raises(DataError) as e:
        load_spoke(strict)
    assert "min_rating" in e.value.message and e.value.key == "spoke.min_rating"


def test_source_emptied_by_filter_is_named(tmp_path):
    c = cfg("structured_shell")
    folder = tmp_path / "structured_shell"
    folder.mkdir()
    for s in c["sources"]:
        recs = load_jsonl(DATA_DIR / "structured_shell" / s["path"])
        if s["name"] == "scripts":
            recs = [r for r in recs if r["rating"] < c["min_rating"]]
        (folder / s["path"]).write_text("".join(json.dumps(r) + "\n" for r in recs))
    with pytest.raises(DataError) as e:
        load_spoke(c, data_dir=tmp_path)
    assert "`scripts`" in e.value.message and "min_rating" in e.value.message


def test_kind_mismatch_and_misplaced_split_are_errors(tmp_path):
    folder = tmp_path / "skill_creation"
    folder.mkdir()
    c = cfg("skill_creation")
    for s in c["sources"]:
        shutil.copy(DATA_DIR / "skill_creation" / s["path"], folder / s["path"])
    swapped = {**c, "sources": [{**s, "kind": "sft"} for s in c["sources"]]}
    with pytest.raises(DataError, match="kind=sft"):
        load_spoke(swapped, data_dir=tmp_path)
    leak = json.loads(json.dumps(GOOD))
    leak["split"] = ["eval"]
    (tmp_path / "vox_lang").mkdir()
    for s in cfg("vox_lang")["sources"]:
        (tmp_path / "vox_lang" / s["path"]).write_text(json.dumps(leak) + "\n")
    with pytest.raises(DataError, match="leak"):
        load_spoke(cfg("vox_lang"), data_dir=tmp_path)


# ------------------------------------------------------------------ mix rule, eval, texts
def test_mix_rule_is_round_weight_times_n_and_seeded():
    c = cfg("rust_workspace")
    recs, stats = load_spoke(c, seed=0)
    n, total_w = stats["available"], sum(s["weight"] for s in c["sources"])
    for s in c["sources"]:
        assert stats["by_source"][s["name"]]["selected"] == round(s["weight"] / total_w * n)
    assert Counter(r["source"] for r in recs) == {
        s["name"]: stats["by_source"][s["name"]]["selected"] for s in c["sources"]}
    again, _ = load_spoke(c, seed=0)
    other, _ = load_spoke(c, seed=1)
    assert [r["id"] for r in again] == [r["id"] for r in recs]
    assert [r["id"] for r in other] != [r["id"] for r in recs]


def test_upsampling_draws_with_replacement_and_counts_it():
    c = cfg("mcp_tool_chain")
    skewed = {**c, "sources": [{**s, "weight": 0.9 if s["name"] == "single_calls" else 0.1}
                               for s in c["sources"]]}
    recs, stats = load_spoke(skewed)
    single = stats["by_source"]["single_calls"]
    assert single["upsampled"] == single["target"] - single["available"] > 0
    ids = [r["id"] for r in recs if r["source"] == "single_calls"]
    assert len(ids) == single["target"] and len(set(ids)) == single["available"]
    assert stats["by_source"]["chains"]["unselected"] > 0


def test_load_eval_and_pairs():
    for spoke in SPOKES:
        recs = load_eval(cfg(spoke))
        assert len(recs) >= 30 and all("eval" in r["split"] for r in recs)
    pairs = [r for r in load_eval(cfg("skill_creation")) if "prompt" in r]
    assert len(pairs) >= 15 and all(CHECKS["skill_frontmatter"](r) for r in pairs)


def test_corpus_texts_are_exactly_the_training_records():
    texts = list(corpus_texts())
    train = [render(r) for s in SPOKES for r in train_records(s)]
    assert sorted(texts) == sorted(train)
    assert not set(texts) & {render(r) for s in SPOKES for r in eval_records(s)}


def test_corpus_module_needs_no_torch():
    code = "import sys, mens.data.corpus, mens.synth.admission; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)


# ------------------------------------------------------------------ held out
def grams(text: str) -> set[tuple[str, ...]]:
    for tok in ("<|im_start|>", "<|im_end|>", "<|endoftext|>"):   # never glue a word to one
        text = text.replace(tok, " ")
    w = text.lower().split()
    return {tuple(w[i:i + NGRAM]) for i in range(len(w) - NGRAM + 1)}


def answer(rec: dict) -> str:
    """Every assistant turn, its tool calls as the Hermes text a model writes for them."""
    msgs = rec["chosen"] + rec["rejected"] if "prompt" in rec else rec["messages"]
    return "\n".join(as_text(m) for m in msgs if m["role"] == "assistant")


def prompt(rec: dict) -> str:
    msgs = rec["prompt"] if "prompt" in rec else rec["messages"]
    return " ".join(" ".join(m["content"] for m in msgs if m["role"] == "user").split())


def test_no_eval_record_is_contained_in_any_training_text():
    """Held out, defined strictly: no eval answer (every assistant turn, joined; both sides of a
    pair) shares any 12-word sequence (lower-cased, whitespace-split) with ANY training record
    of ANY spoke (all roles, rejected answers included) or with the tiny base's pretraining
    text (mens/data/pretrain/*.txt, when present); and no eval prompt equals a training one."""
    train = [r for s in SPOKES for r in train_records(s)]
    seen: set = set()
    for r in train:
        msgs = r["prompt"] + r["chosen"] + r["rejected"] if "prompt" in r else r["messages"]
        seen |= grams("\n".join(as_text(m) for m in msgs))
    for f in sorted((DATA_DIR / "pretrain").glob("*.txt")):
        seen |= grams(f.read_text(encoding="utf-8"))
    prompts = {prompt(r) for r in train}
    hits = [(r["id"], " ".join(g)) for s in SPOKES for r in eval_records(s)
            for g in sorted(grams(answer(r)) & seen)[:1]]
    assert not hits, f"{len(hits)} eval records overlap training, e.g. {hits[:3]}"
    same = [r["id"] for s in SPOKES for r in eval_records(s) if prompt(r) in prompts]
    assert not same, f"eval prompts equal to training prompts: {same[:5]}"


# ------------------------------------------------------------------ determinism
def regenerate(tmp_path, *spokes, env=None) -> Path:
    args = [a for s in spokes for a in ("--spoke", s)]
    subprocess.run([sys.executable, str(ROOT / "tools" / "make_corpus.py"), "--out",
                    str(tmp_path), *args], check=True, cwd=tmp_path, capture_output=True,
                   timeout=600, env={**os.environ, **(env or {})})
    return tmp_path


def same_files(tmp_path, spoke):
    got = sorted(p.name for p in (tmp_path / spoke).iterdir())
    committed = [p.name for p in (DATA_DIR / spoke).iterdir()   # not others' files (lengths)
                 if p.suffix == ".jsonl" or p.name == "manifest.json"]
    assert got == sorted(committed)
    for name in got:
        assert (tmp_path / spoke / name).read_bytes() == (DATA_DIR / spoke / name).read_bytes(), \
            f"{spoke}/{name} differs from the committed file: rerun tools/make_corpus.py"


def test_generator_is_deterministic_one_spoke(tmp_path):
    """Fast sibling of the full test: one spoke's files, byte for byte (jq cross-check off:
    it verifies claims, it never changes output)."""
    same_files(regenerate(tmp_path, "speech_to_code", env={"MENS_CORPUS_JQ_CHECK": "0"}),
               "speech_to_code")


@pytest.mark.slow
def test_generator_is_deterministic_all_spokes(tmp_path):
    """A full regeneration (10-15 s) reproduces every committed file byte for byte."""
    out = regenerate(tmp_path)
    tools = {"rust_workspace": shutil.which("cargo") or (Path.home() / ".cargo/bin/cargo").exists(),
             "structured_shell": shutil.which("bash")}
    for spoke in SPOKES:
        if not tools.get(spoke, True):
            continue    # without the check's tool its records are `verified: null` by design
        same_files(out, spoke)
