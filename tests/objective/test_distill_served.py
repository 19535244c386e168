"""On-policy distillation from a served teacher (issue #39, lane.distill.teacher_url) against a
real `mens serve` on 127.0.0.1 (mens's app on uvicorn in a thread, as tests/objective/
test_rollout_server.py serves it). The teacher is a different tiny model — the tiny rung with
noise added to its matrices, saved as an HF model directory — served by the server and, for
comparison, loaded in-process as a local teacher (`lane.distill.teacher=<that directory>`).

  - the scoring route (vLLM's prompt_logprobs) answers the in-process teacher's log_softmax at
    the given tokens, within 1e-4;
  - the served loss (the sampled-token reverse KL) equals the same estimator computed with the
    local teacher, value and gradient within 1e-5, on the student's own samples;
  - a real `python -m mens lane=distill lane.distill.teacher_url=…` run completes and logs the
    reverse KL (slow);
  - a run with both teachers, neither, or beta/lmbda ≠ 1 with a served one is a ConfigError
    (exit 2, one paragraph naming the key and the fix)."""
from __future__ import annotations

import json
import math

import httpx
import pytest
import torch

import rl_util
from serve_util import serving
from train_util import FAST_TRAIN

T = 12
SERVED = ["lane.distill.beta=1", "lane.distill.lmbda=1"]


def make_teacher(where):
    """The tiny rung, every 2-D weight but the embedding moved by its own spread: a clearly
    different model with the student's tokenizer."""
    from mens.config.compose import compose
    from mens.model.load import load_base, load_tokenizer

    rung = compose(["+rung=tiny"]).rung
    model, tok = load_base(rung), load_tokenizer(rung)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() == 2 and "embed" not in n:
                p.add_(torch.randn(p.shape, generator=g) * p.std())
    model.save_pretrained(where)
    tok.save_pretrained(where)
    return where


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(url, teacher dir, the in-process teacher, the student spec/model/tokenizer/records/
    encoder): a real server over the teacher directory, and the student — the tiny rung with
    its LoRA B matrices moved off zero — whose spec names the server."""
    from mens.config.compose import compose
    from mens.objective.distill import load_teacher
    from mens.plan.spec import compile_run
    from mens.serve.openai_api import build_app
    from mens.serve.slots import Slots

    where = make_teacher(tmp_path_factory.mktemp("teacher") / "model")
    slots = Slots(compose(["+rung=tiny", f"rung.path={where}"]).rung, [], device="cpu",
                  dtype="fp32")
    with serving(build_app(slots)) as url:
        def spec_for(*teacher):
            return compile_run(compose(["+hw=cpu", "train.seq_len=128", "train.micro_batch=2",
                                        "train.global_batch=2", "lane=distill", *teacher,
                                        f"lane.distill.max_completion_length={T}"]), "train")[0]
        spec = spec_for(f"lane.distill.teacher_url={url}/v1", *SERVED)
        local_spec = spec_for(f"lane.distill.teacher={where}", *SERVED)
        model, tok, records, encoder = rl_util.student(spec)
        yield {"url": url, "where": where, "teacher": load_teacher(local_spec, model),
               "spec": spec, "local_spec": local_spec, "model": model, "tok": tok,
               "records": records, "encoder": encoder}
    slots.close()


def test_the_scoring_route_answers_the_teachers_log_softmax(served):
    """prompt_logprobs on /v1/completions: per prompt [None, {id: {logprob, rank,
    decoded_token}}, …] with the prompt's own token and the top k, as vLLM answers it."""
    tok, teacher = served["tok"], served["teacher"]
    rows = [tok.encode("the quick brown fox jumps"), tok.encode("hello there, how are you?")[:7]]
    r = httpx.post(f"{served['url']}/v1/completions", timeout=120, json={
        "model": "base", "prompt": rows, "max_tokens": 1, "temperature": 1.0,
        "prompt_logprobs": 2})
    assert r.status_code == 200, r.text
    worst = 0.0
    for row, choice in zip(rows, sorted(r.json()["choices"], key=lambda c: c["index"])):
        got = choice["prompt_logprobs"]
        assert got[0] is None and len(got) == len(row)
        with torch.no_grad():
            want = teacher(input_ids=torch.tensor([row])).logits[0, :-1].float().log_softmax(-1)
        for i, (t, entry) in enumerate(zip(row[1:], got[1:])):
            worst = max(worst, abs(entry[str(t)]["logprob"] - want[i, t].item()))
            top = sorted(entry.values(), key=lambda e: e["rank"])
            assert top[0]["rank"] == 1 and top[0]["logprob"] == pytest.approx(
                want[i].max().item(), abs=1e-4)
            assert entry[str(t)]["rank"] == 1 + int((want[i] > want[i, t]).sum())
            assert 1 <= len(entry) <= 3
    print(f"\nserved vs in-process teacher log-probs: max |diff| {worst:.2e} over "
          f"{sum(map(len, rows)) - 2} tokens")
    assert worst <= 1e-4


def test_the_served_loss_equals_the_same_estimator_with_the_local_teacher(served):
    """On the student's own samples, the loss with the server's log-probs and with the local
    teacher's (log_softmax gathered at the sampled tokens): value and gradient within 1e-5.
    The gradient is the REINFORCE one (k·∇log s), not ∇ of k itself (zero in expectation)."""
    from mens.objective.distill import (IGNORE, Distill, generalized_jsd_loss, row_logits,
                                        sampled_reverse_kl_loss, token_logps)

    model = served["model"]
    obj = Distill(served["spec"])
    obj.bind(model, served["tok"], served["records"], served["encoder"])
    assert obj.teacher is None and obj.served.model == "base"
    ids, mask, labels, Tw, lengths = obj._sampled_rows(
        model, list(obj.records.values()), seed=3, temperature=1.0)
    target = labels[:, -Tw:]
    with torch.no_grad():
        t_logits = row_logits(served["teacher"], ids, mask, Tw + 1)
        t_local = token_logps(t_logits, target)
        full = generalized_jsd_loss(row_logits(model, ids, mask, Tw + 1), t_logits, target,
                                    beta=1.0).item()      # the local path's exact reverse KL
    t_served = obj.served.completion_logps(ids, mask, Tw)

    def loss_and_grads(t_lp):
        model.zero_grad()
        s_lp = token_logps(row_logits(model, ids, mask, Tw + 1), target)
        loss, rkl = sampled_reverse_kl_loss(s_lp, t_lp, target != IGNORE)
        loss.backward()
        return loss.item(), rkl.item(), [p.grad.clone() for p in model.parameters()
                                         if p.requires_grad]
    served_loss, served_rkl, served_g = loss_and_grads(t_served)
    local_loss, _, local_g = loss_and_grads(t_local)
    dg = max((a - b).abs().max().item() for a, b in zip(served_g, local_g))
    dlp = (t_served - t_local).abs().max().item()
    print(f"\n{sum(lengths)} sampled tokens: served loss {served_loss:.6f}, local {local_loss:.6f}"
          f" (|diff| {abs(served_loss - local_loss):.1e}); teacher log-probs |diff| ≤ {dlp:.1e};"
          f" gradient |diff| ≤ {dg:.1e} (largest entry "
          f"{max(g.abs().max().item() for g in local_g):.3f}); the exact reverse KL over the "
          f"vocabulary on these rows {full:.6f}")
    assert full > 0.05                                          # the teacher is another model
    assert served_loss == pytest.approx(served_rkl) and served_loss != 0
    assert abs(served_loss - local_loss) <= 1e-5 * max(1.0, abs(local_loss))
    assert dg <= 1e-5 and any(g.abs().sum() > 0 for g in local_g)
    # the step itself: the same loss on its own sample, every step on-policy, KL logged
    from mens.objective.base import Step
    loss, m = obj.step(Step(None, None, 1, None, model=model, group=(0, 0)),
                       {"record_ids": ["r0", "r1"]})
    assert m["on_policy"].item() == 1.0 and m["reverse_kl"].item() == pytest.approx(loss.item())
    assert m["teacher/score_s"].item() > 0


def test_a_served_teacher_costs_no_memory_and_a_round_trip(served, compile_run):
    """The plan: the teacher term is 0 and says `served`; the ETA replaces the teacher's
    forward by an assumed scoring round trip."""
    base = ["+hw=cpu", "train.seq_len=128", "train.micro_batch=2", "train.global_batch=2",
            "lane=distill", f"lane.distill.max_completion_length={T}", *SERVED]
    spec, plan = compile_run(*base, f"lane.distill.teacher_url={served['url']}/v1")
    _, local = compile_run(*base, f"lane.distill.teacher={served['where']}")
    assert plan.components["teacher"] == 0 < local.components["teacher"]
    assert any("served" in n for n in spec.notes)
    eta = ["+hw=h100", "+rung=0.6b", "train.seq_len=1024", "train.micro_batch=4",
           "train.global_batch=4", "lane=distill", *SERVED]
    plan = compile_run(*eta, f"lane.distill.teacher_url={served['url']}/v1")[1]
    fwd = compile_run(*eta, "lane.distill.teacher=tiny")[1].cost["parts"]["step_forward"]["s"]
    parts = plan.cost["parts"]
    assert parts["teacher_scoring"]["s"] >= 0.05 > fwd     # the round trip, assumed
    assert "step_forward" not in parts and parts["teacher_scoring"]["basis"] == "assumed"
    assert any("round trip" in a for a in plan.cost["assumed"])


@pytest.mark.parametrize("overrides, key, fix", [
    (["lane.distill.teacher=tiny", "lane.distill.teacher_url=http://127.0.0.1:8000/v1"],
     "lane.distill.teacher_url", "lane.distill.teacher=null"),
    (["lane.distill.teacher_url=http://127.0.0.1:8000/v1"], "lane.distill.beta",
     "lane.distill.beta=1 lane.distill.lmbda=1"),
    (["lane.distill.teacher_url=http://127.0.0.1:8000/v1", "lane.distill.beta=1"],
     "lane.distill.lmbda", "lane.distill.lmbda=1"),
    (["lane.distill.teacher_url=http://127.0.0.1:8000/v1", *SERVED, "lane.distill.seq_kd=true"],
     "lane.distill.seq_kd", "lane.distill.seq_kd=false"),
    (["lane.distill.teacher_url=127.0.0.1:8000", *SERVED], "lane.distill.teacher_url", "http://"),
    ([], "lane.distill.teacher", "lane.distill.teacher_url="),       # neither: the plan says
])
def test_teacher_config_errors_name_the_key_and_the_fix(compile_run, overrides, key, fix):
    from mens.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        compile_run("+hw=cpu", "lane=distill", *overrides)
    assert e.value.code == 2 and e.value.key == key and fix in e.value.message
    assert "\n" not in e.value.message


def test_the_cli_exits_2_on_beta_with_a_served_teacher(mens_cli):
    p = mens_cli("mens.plan", "+hw=cpu", "lane=distill",
                 "lane.distill.teacher_url=http://127.0.0.1:8000/v1")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "`lane.distill.beta=0.5` cannot be used with a served teacher" in p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.slow
def test_a_run_with_a_served_teacher_logs_the_reverse_kl(served, mens_cli, tmp_path):
    """`python -m mens lane=distill lane.distill.teacher_url=…`: 3 steps on the tiny rung, each
    scored by the server; the telemetry logs the per-token reverse KL, the summary the
    held-out one before and after."""
    from mens.run.telemetry import read

    r = mens_cli("mens", *FAST_TRAIN, "lane=distill",
                 f"lane.distill.teacher_url={served['url']}/v1", *SERVED, f"lane.distill.max_completion_length={T}", "lane.distill.temperature=1",
                 "train.max_steps=3", "train.global_batch=2", "train.micro_batch=2",
                 "train.eval_max_records=2", "data.collateral=none",
                 f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "the teacher is served" in r.stderr
    steps = [e for e in read(tmp_path / "run" / "telemetry.jsonl") if e["event"] == "TRAIN_STEP"]
    kl = [e["reverse_kl"] for e in steps]
    print(f"\nper-step reverse KL (sampled-token estimate): {[round(k, 4) for k in kl]}; scoring "
          f"round trips {[round(e['teacher/score_s'], 3) for e in steps]} s")
    # one step's estimate is noisy (a token's k can be negative); its mean is KL(s‖t) > 0
    assert len(steps) == 3 and all(math.isfinite(k) for k in kl) and sum(kl) / 3 > 0.05
    held = json.loads((tmp_path / "run" / "summary.json").read_text())["held_out_distill"]
    print(f"held-out reverse KL {held['before']['reverse_kl']:.4f} → "
          f"{held['after']['reverse_kl']:.4f}")
    assert held["before"]["reverse_kl"] > 0.05 and "forward_kl" not in held["after"]
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    assert plan["components"]["teacher"] == 0
