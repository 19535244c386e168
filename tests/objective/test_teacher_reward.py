"""GRPO's teacher reward (grpo.reward=teacher, mens.objective.rewards.teacher_rewards) against a
real OpenAI-compatible server on 127.0.0.1 (tests/teacher_server.py, scripted replies) through
the real teacher client and cascade: scores in order, an unusable reply counted as 0, a dead
teacher a ConfigError, what the request carries — and one real GRPO step rewarded by it."""
from __future__ import annotations

import json
import secrets
import socket

import pytest

from synth.teacher.teacher_util import KEY_ENV, candidate, teacher_cfg
from teacher_server import replay_server
from train_util import FAST_TRAIN

HEAD = [{"role": "system", "content": "Answer with the command in a ```bash block."},
        {"role": "user", "content": "list the files here"}]


def score(n, reason="graded", **kw):
    return {"json": {"reason": reason, "score": n},
            "usage": {"prompt_tokens": 100, "completion_tokens": 10}, **kw}


@pytest.fixture
def teacher_for(monkeypatch):
    """A Teacher over one scripted replay server (model `grader`, priced), and the server."""
    from mens.synth.teacher import Teacher

    key = "sk-test-" + secrets.token_hex(8)
    monkeypatch.setenv(KEY_ENV, key)
    servers = []

    def make(scripts):
        cm = replay_server([{"model": "grader", **s} for s in scripts], api_key=key)
        srv = cm.__enter__()
        servers.append(cm)
        cfg = teacher_cfg(candidate(srv, "grader", price_in_per_mtok=1.0, price_out_per_mtok=2.0))
        return Teacher.from_config(cfg), srv
    yield make
    for cm in servers:
        cm.__exit__(None, None, None)


def test_scores_are_rewards_in_order_beside_the_format_reward(teacher_for):
    """Through oracle_rewards(reward="teacher"): score / 10 per answer, in order, whatever order
    the replies land in; the format reward (a ```bash fence) is added at its weight."""
    from mens.objective.rewards import oracle_rewards

    texts = ["```bash\nls\n```", "just run ls", "```bash\nls -a\n```"]
    teacher, srv = teacher_for([{"match": f"<answer>{t}</answer>".replace("\n", "\\n"),
                                 "replies": [score(n)]} for t, n in zip(texts, (7, 0, 10))])
    rec = {"id": "r", "messages": [*HEAD, {"role": "assistant", "content": "```bash\nls\n```"}]}
    r = oracle_rewards("shell_syntax", [rec] * 3, [HEAD] * 3, texts, reward="teacher",
                       format_weight=0.5, teacher=teacher)
    assert r.teacher == [0.7, 0.0, 1.0] and r.format == [1.0, 0.0, 1.0]
    assert r.total == pytest.approx([1.2, 0.0, 1.5]) and r.passed is None and r.partial is None
    m = r.metrics
    assert m["reward"] == pytest.approx(0.9) and m["rewards/teacher/mean"] == pytest.approx(1.7 / 3)
    assert m["rewards/teacher_invalid"] == 0 and m["teacher/answers"] == 3
    assert (m["teacher/prompt_tokens"], m["teacher/completion_tokens"]) == (300, 30)
    assert m["teacher/cost_usd"] == pytest.approx(3 * (100 * 1.0 + 10 * 2.0) / 1e6)
    assert m["teacher/teachers"] == ["grader"] and len(srv.requests) == 3


def test_the_request_asks_for_mens_reward_on_the_prompt_and_the_answer(teacher_for):
    from mens.objective.rewards import teacher_rewards
    from mens.synth.teacher import SCHEMAS

    teacher, srv = teacher_for([{"replies": [score(4)]}])
    r = teacher_rewards(teacher, [HEAD], ["ls -la"])
    assert r.total == [0.4]
    (req,) = srv.requests
    body = req["body"]
    assert req["authorized"] and body["model"] == "grader" and body["temperature"] == 0.0
    assert body["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "mens_reward", "schema": SCHEMAS["mens_reward"], "strict": True}}
    assert list(SCHEMAS["mens_reward"]["properties"]) == ["reason", "score"]   # reason first
    system, user = body["messages"]
    assert system["role"] == "system" and "`score`" in system["content"]
    assert "[system]\nAnswer with the command" in user["content"]
    assert "[user]\nlist the files here\n</conversation>" in user["content"]
    assert user["content"].endswith("<answer>ls -la</answer>")


def test_an_unusable_reply_is_reward_0_and_counted(teacher_for, capsys):
    """Prose instead of JSON, and a score off the 0..10 scale: 0 each, counted, said — the
    third answer's valid score is kept."""
    from mens.objective.rewards import teacher_rewards

    teacher, _ = teacher_for([
        {"match": "<answer>a0</answer>", "replies": [{"content": "I'd give it a 7."}]},
        {"match": "<answer>a1</answer>", "replies": [score(11)]},
        {"match": "<answer>a2</answer>", "replies": [score(8)]}])
    r = teacher_rewards(teacher, [HEAD] * 3, ["a0", "a1", "a2"])
    assert r.total == r.teacher == [0.0, 0.0, 0.8]
    assert r.metrics["rewards/teacher_invalid"] == 2
    problems = r.metrics["teacher/problems"]
    assert any("not JSON" in p for p in problems) and any("score" in p for p in problems)
    assert "no usable score for 2 of 3 answers (reward 0)" in capsys.readouterr().err


def test_an_unreachable_teacher_is_a_config_error_naming_it():
    from mens.errors import ConfigError
    from mens.objective.rewards import teacher_rewards
    from mens.synth.teacher import Teacher

    with socket.socket() as s:                      # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    teacher = Teacher.from_config(teacher_cfg(candidate(url, "grader", api_key_env=None)))
    with pytest.raises(ConfigError) as e:
        teacher_rewards(teacher, [HEAD], ["ls"])
    assert e.value.key == "teacher" and "grpo.reward=teacher" in e.value.message
    assert url in e.value.message and "cannot connect" in e.value.message
    assert "teacher=custom" in e.value.message and "grader" in e.value.message


# --------------------------------------------- one real GRPO step rewarded by the teacher
GRPO = [*FAST_TRAIN, "lane=grpo", "spoke=structured_shell", "train.seq_len=256",
        "train.global_batch=2", "train.micro_batch=2", "train.max_steps=1",
        "train.eval_max_records=2", "lane.grpo.num_generations=2",
        "lane.grpo.max_completion_length=16"]


def test_a_grpo_step_is_rewarded_by_the_teacher(compose, tmp_path, monkeypatch):
    """2 prompts × 2 samples on the tiny rung, each scored by the teacher (3, 9, 5, 7 in
    whatever order the requests land): the step logs their mean as its reward."""
    from mens.plan.spec import compile_run
    from mens.run.telemetry import read
    from mens.train.run import train_run

    key = "sk-test-" + secrets.token_hex(8)
    monkeypatch.setenv(KEY_ENV, key)
    with replay_server([{"model": "grader", "replies": [score(n) for n in (3, 9, 5, 7)]}],
                       api_key=key) as srv:
        cfg = compose([*GRPO, "lane.grpo.reward=teacher", "teacher=endpoint",
                       f"teacher.base_url={srv.base_url}", "teacher.model=grader",
                       f"teacher.api_key_env={KEY_ENV}"])
        spec, plan = compile_run(cfg, "train")
        assert spec.teacher.base_url == srv.base_url   # the run keeps its teacher (names only)
        assert key not in json.dumps(spec.to_dict())
        summary = train_run(spec, plan, tmp_path / "run")
    assert summary["steps"] == 1
    (step,) = [r for r in read(tmp_path / "run" / "telemetry.jsonl") if r["event"] == "TRAIN_STEP"]
    assert step["reward"] == pytest.approx(0.6)          # (3 + 9 + 5 + 7) / 4 / 10
    assert step["rewards/teacher/mean"] == pytest.approx(0.6)
    assert step["rewards/teacher_invalid"] == 0 and step["teacher/answers"] == 4
    assert len(srv.requests) == 4 and all(
        r["body"]["response_format"]["json_schema"]["name"] == "mens_reward" for r in srv.requests)
    assert key not in (tmp_path / "run" / "telemetry.jsonl").read_text()


def test_only_a_teacher_reward_builds_a_teacher(compile_run):
    """reward=partial binds with no teacher at all (none is configured, none is built)."""
    from mens.objective.grpo import Grpo

    spec, _ = compile_run(*GRPO, purpose="train")
    objective = Grpo(spec)
    objective.bind(None, None, [])
    assert spec.lane.grpo.reward == "partial" and objective.teacher is None
