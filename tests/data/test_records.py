"""A typed record: the format registry (`FORMATS`: each input format's detect and normalize) and
`kind()`, the one function that says whether a mens record is a chat, a pair or a text — and a
scan of mens/ that fails wherever other code tells a record's kind by its keys."""
from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

from mens.data import formats
from mens.data.formats import FORMATS, Bad, detect, kind, normalize, turns

MENS = Path(formats.__file__).resolve().parent.parent
OWNER = Path(formats.__file__).resolve()
# The keys whose presence tells a record's kind or format. `"prompt" in x` is how a pair was
# told, but `.get("prompt")` is also how a request body (studio, OpenAI API) is read, so only the
# membership test is flagged for it; likewise the user formats' own keys.
IN_KEYS = {"messages", "chosen", "rejected", "text", "prompt", "conversations", "completion",
           "instruction"}
GET_KEYS = {"messages", "chosen", "rejected", "text", "conversations"}
WAIVER = "# not a record"   # a line that tests a word in something that is no record says so


def sniffs(source: str) -> list[tuple[int, str]]:
    """(line, what) for each key test that decides a record's kind: `"chosen" in r`,
    `"messages" not in r`, `r.get("text")`, `r.pop("chosen", …)`. Reading a field of a record whose
    kind is known (`r["messages"]` after kind() said chat) is a subscript and is not flagged."""
    lines = source.splitlines()
    out = []
    for node in ast.walk(ast.parse(source)):
        hit = None
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) \
                and node.left.value in IN_KEYS \
                and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            hit = f'"{node.left.value}" in …'
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("get", "pop") and node.args \
                and isinstance(node.args[0], ast.Constant) and node.args[0].value in GET_KEYS:
            hit = f'….{node.func.attr}("{node.args[0].value}")'
        if hit and WAIVER not in lines[node.lineno - 1]:
            out.append((node.lineno, hit))
    return sorted(out)


def test_nobody_but_the_registry_sniffs_a_records_keys():
    found = [f"{p.relative_to(MENS.parent)}:{line}: {what}"
             for p in sorted(MENS.rglob("*.py")) if p.resolve() != OWNER
             for line, what in sniffs(p.read_text(encoding="utf-8"))]
    assert not found, ("these tell a record's kind by its keys; ask mens.data.formats.kind() "
                       "(or turns/chat/answers) instead:\n" + "\n".join(found))


def test_the_scan_can_fail():
    snippet = '''
def f(r, body):
    if "chosen" in r:                       # flagged
        return r["prompt"] + r["chosen"]
    if "messages" not in r:                 # flagged
        return r.get("text")                # flagged
    msgs = r.get("messages", [])            # flagged
    if kind(r) == "chat":
        return r["messages"]                # a known chat's field: fine
    q = body.get("prompt")                  # a request body's field: fine
    return "text" in q  # not a record: a substring test, waived
'''
    assert sniffs(snippet) == [(3, '"chosen" in …'), (5, '"messages" in …'),
                               (6, '….get("text")'), (7, '….get("messages")')]


def test_kind_of_each_mens_record():
    chat = {"id": "a", "messages": [{"role": "user", "content": "q"},
                                    {"role": "assistant", "content": "a"}]}
    pair = {"id": "b", "prompt": [{"role": "user", "content": "q"}],
            "chosen": [{"role": "assistant", "content": "good"}],
            "rejected": [{"role": "assistant", "content": "bad"}]}
    text = {"id": "c", "text": "plain words"}
    assert [kind(r) for r in (chat, pair, text)] == ["chat", "pair", "text"]
    assert turns(chat) == chat["messages"]
    assert turns(pair) == pair["prompt"] + pair["chosen"]
    assert turns(pair, "rejected") == pair["prompt"] + pair["rejected"]
    assert turns(text) == [] and formats.chat(pair) == [] and formats.chat(chat) == chat["messages"]
    assert formats.answers(pair) == pair["chosen"] and formats.answers(chat) == chat["messages"]
    assert formats.words(pair) == ["q", "good"] and formats.words(text) == ["plain", "words"]


EXAMPLES = {   # one record of each registered format, and the kind normalize makes of it
    "messages": {"messages": [{"role": "user", "content": "q"},
                              {"role": "assistant", "content": "a"}]},
    "sharegpt": {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]},
    "alpaca": {"instruction": "q", "input": "", "output": "a"},
    "prompt_completion": {"prompt": "q", "completion": "a"},
    "text": {"text": "plain words"},
    "preference": {"prompt": "q", "chosen": "good", "rejected": "bad"},
    "labeled": {"prompt": "q", "completion": "a", "label": True},
}


def test_every_registered_format_detects_and_normalizes_to_its_kind():
    assert set(FORMATS) == set(EXAMPLES)
    for name, rec in EXAMPLES.items():
        assert detect(rec) == name
        out = normalize(rec, name, system="be brief")
        assert kind(out) == FORMATS[name].kind, name
        if kind(out) != "text":
            assert turns(out)[0] == {"role": "system", "content": "be brief"}, name
    with pytest.raises(Bad, match="unknown format 'nope'"):
        normalize(EXAMPLES["text"], "nope")


def _old_detect(rec: dict) -> str | None:
    """detect() as it was written before the registry (an if-chain), to hold the order."""
    if "chosen" in rec and "rejected" in rec:
        return "preference"
    for fmt, key in (("messages", "messages"), ("sharegpt", "conversations")):
        if key in rec:
            return fmt
    if "instruction" in rec and "output" in rec:
        return "alpaca"
    if "prompt" in rec and "completion" in rec:
        return "prompt_completion"
    if "text" in rec:
        return "text"
    return None


def test_detection_order_is_unchanged_for_every_mix_of_keys():
    keys = ["chosen", "rejected", "messages", "conversations", "instruction", "output", "prompt",
            "completion", "text"]
    for n in range(len(keys) + 1):
        for combo in itertools.combinations(keys, n):
            rec = dict.fromkeys(combo, "x")
            assert detect(rec) == _old_detect(rec), combo
