"""GRPO's oracle rewards on the spokes' real oracles (bash -n, jsonschema, ast, in their
sandboxed children): pass, partial credit per piece, format, a timeout counted as 0, an absent
tool as NaN (unverified), and the reward kinds that are refused."""
from __future__ import annotations

import math
import shutil

import pytest

from mens.errors import ConfigError
from mens.objective.rewards import has_shape, oracle_rewards, pieces

HAS_BASH = shutil.which("bash") is not None
SYSTEM = {"role": "system", "content": "Answer with the command in a ```bash block."}
TOOLS = ('<tools>\n{"name": "convert", "parameters": {"type": "object", "properties": {"amount": '
         '{"type": "number"}, "to": {"type": "string", "pattern": "^[A-Z]{3}$"}}, "required": '
         '["amount", "to"]}}\n{"name": "slow", "parameters": {"type": "object", "properties": '
         '{"s": {"type": "string", "pattern": "^(a+)+$"}}}}\n</tools>')
CALL = '<tool_call>\n{"name": "%s", "arguments": %s}\n</tool_call>'


def prompt(system: dict, user: str):
    """(record, head): a held-out record and the messages an answer responds to."""
    head = [system, {"role": "user", "content": user}]
    return {"id": "r", "messages": [*head, {"role": "assistant", "content": "data's answer"}]}, head


def judge(check, prompt_, texts, **kw):
    rec, head = prompt_
    return oracle_rewards(check, [rec] * len(texts), [head] * len(texts), texts, **kw)


@pytest.mark.skipif(not HAS_BASH, reason="needs bash: shell_syntax is unverified without it")
def test_shell_pass_fail_and_partial_per_block():
    good, bad = "```bash\njq -r '.[].name' a.json | sort -u\n```", "```bash\nfor f in *; do\n```"
    texts = [good, bad, f"{good}\nthen\n{bad}", "no code at all", good + "\n" + good]
    r = judge("shell_syntax", prompt(SYSTEM, "names"), texts, reward="partial", workers=2)
    assert r.passed == [1.0, 0.0, 0.0, 0.0, 1.0]
    assert r.partial == [1.0, 0.0, 0.5, 0.0, 1.0] == r.total     # 1 of the 2 blocks passes
    assert r.metrics["oracle/pieces"] == 6 and r.metrics["oracle/timeouts"] == 0
    assert r.metrics["rewards/pass/mean"] == 0.4 and r.metrics["rewards/partial/mean"] == 0.5
    plain = judge("shell_syntax", prompt(SYSTEM, "names"), texts, reward="pass")
    assert plain.total == plain.passed == r.passed and plain.partial is None


def test_tool_calls_partial_credit_and_a_timeout_is_zero_and_counted():
    """Each call is judged against its tool's schema alone; a catastrophic-backtracking pattern
    stops the check (jsonschema in the child, killed at timeout_s): reward 0, counted, and the
    other answers in the batch keep their verdicts."""
    ok = CALL % ("convert", '{"amount": 10, "to": "USD"}')
    wrong = CALL % ("convert", '{"amount": "10", "to": "usd"}')
    slow = CALL % ("slow", '{"s": "%sb"}' % ("a" * 40))
    texts = [ok, ok + wrong + CALL % ("nope", "{}"), slow, ok]
    r = judge("tool_call_schema", prompt({"role": "system", "content": TOOLS}, "convert 10"),
              texts, reward="partial", timeout_s=1.0, workers=2)
    assert r.passed == [1.0, 0.0, 0.0, 1.0]
    assert r.partial[0] == 1.0 and r.partial[1] == pytest.approx(1 / 3) and r.partial[2] == 0.0
    assert r.metrics["oracle/timeouts"] == 1 and r.metrics["oracle/crashes"] == 0
    assert r.metrics["oracle/unverified"] == 0


def test_python_format_reward_and_weight():
    head = prompt({"role": "system", "content": "Answer in a ```python block."}, "double")
    texts = ["```python\ndef f(x):\n    return 2 * x\n```", "```python\ndef f(x)\n```",
             "def f(x): return 2 * x", "```python\n\n```"]
    r = judge("python_parses", head, texts, format_weight=0.5)
    assert r.passed == [1.0, 0.0, 0.0, 0.0]          # an empty fence proves nothing: fails
    assert r.format == [1.0, 1.0, 0.0, 0.0]
    assert r.total == [1.5, 0.5, 0.0, 0.0] and r.metrics["rewards/format/mean"] == 0.5


def test_an_absent_tool_is_nan_counted_never_pass_or_fail():
    r = judge("shell_syntax", prompt(SYSTEM, "x"), ["```bash\necho ok\n```", "no block"],
              path="", reward="partial")            # PATH empty: no bash to run
    assert math.isnan(r.passed[0]) and math.isnan(r.partial[0]) and math.isnan(r.total[0])
    assert r.passed[1] == 0.0                        # no block: a failure whatever the tool
    assert r.metrics["oracle/unverified"] == 1
    assert r.metrics["oracle/unverified_reasons"] == ["bash not found on PATH"]


def test_checks_without_pieces_fall_back_to_pass_loudly(capsys):
    msg = '```json\n{"id": "o1", "sender": "a", "recipients": ["b"], "reply_to": null}\n```'
    r = judge("mesh_messages", prompt({"role": "system", "content": "mesh"}, "go"), [msg, "hi"],
              reward="partial")
    assert r.partial == r.passed == [1.0, 0.0] and r.metrics["rewards/partial_is_pass"]
    assert "partial reward is the pass reward" in capsys.readouterr().err


def test_pieces_and_shapes_are_read_linearly():
    text = "```bash\necho 1\n```\n```python\nx\n```\n```sh\nls\n```" + "```" * 5000
    assert pieces("shell_syntax", text) == ["```bash\necho 1\n```", "```sh\nls\n```"]
    assert pieces("tool_call_schema", "<tool_call> {} </tool_call><tool_call>{") == [
        "<tool_call>\n{}\n</tool_call>"]
    assert has_shape("skill_frontmatter", "---\nname: x\n---") and \
        not has_shape("skill_frontmatter", "```md\n# no front matter\n```")


def test_a_teacher_reward_without_a_teacher_and_unknown_rewards_are_config_errors():
    rec, head = prompt(SYSTEM, "x")
    with pytest.raises(ConfigError, match="no teacher was given"):
        oracle_rewards("shell_syntax", [rec], [head], ["x"], reward="teacher")
    with pytest.raises(ConfigError, match="grpo.reward=best"):
        oracle_rewards("shell_syntax", [rec], [head], ["x"], reward="best")


def test_tool_calls_are_read_in_the_policys_syntax():
    """A Llama 3 policy writes a call as a JSON object: pieces, the format reward and the
    oracle read it in that syntax (the record's `tools` declare the schemas), and the same text
    read as Hermes holds no call. (issue #38)"""
    tools = [{"type": "function", "function": {"name": "convert", "parameters": {
        "type": "object", "properties": {"amount": {"type": "number"}, "to": {
            "type": "string", "pattern": "^[A-Z]{3}$"}}, "required": ["amount", "to"]}}}]
    rec, head = prompt({"role": "system", "content": "Convert."}, "10 EUR in USD")
    rec = {**rec, "tools": tools}
    ok, wrong = '{"name": "convert", "parameters": {"amount": 10, "to": "USD"}}', \
        '{"name": "convert", "parameters": {"amount": 10, "to": "usd"}}'
    assert pieces("tool_call_schema", ok, "llama3") == [
        '<tool_call>\n{"name": "convert", "arguments": {"amount": 10, "to": "USD"}}\n</tool_call>']
    assert has_shape("tool_call_schema", ok, "llama3") and not has_shape("tool_call_schema", ok)
    r = oracle_rewards("tool_call_schema", [rec] * 3, [head] * 3, [ok, wrong, "no call"],
                       reward="partial", format_weight=0.5, syntax="llama3")
    assert r.passed == [1.0, 0.0, 0.0] and r.partial == [1.0, 0.0, 0.0]
    assert r.format == [1.0, 1.0, 0.0] and r.total == [1.5, 0.5, 0.0]
    assert oracle_rewards("tool_call_schema", [rec], [head], [ok]).passed == [0.0]   # as Hermes
