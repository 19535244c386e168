"""Out-of-range numbers and unknown choices fail at compose time (ConfigError, exit 2), naming the
key; legitimate sentinels pass. Also: the DPO losses that `lane.dpo.loss` chooses."""
from __future__ import annotations

import math
import re
import typing
from dataclasses import fields, is_dataclass

import pytest

from mens.config import schema
from mens.errors import ConfigError

DPO = ["lane=dpo", "spoke=skill_creation"]
QLORA = ["lane=qlora"]

# (overrides, the key the error names)
BAD = [
    (["+hw=cpu", "hw.memory_gb=-3"], "hw.memory_gb"),
    (["+hw=h100", "hw.memory_gb=0"], "hw.memory_gb"),
    (["+hw=h100", "hw.memory_gb=nan"], "hw.memory_gb"),
    (["+hw=h100", "hw.memory_gb=inf"], "hw.memory_gb"),
    (["+hw=h100", "hw.tflops_bf16=0"], "hw.tflops_bf16"),
    (["+hw=h100", "hw.bandwidth_gbs=-1"], "hw.bandwidth_gbs"),
    (["+hw=h100", "hw.link.intra_gbs=0"], "hw.link.intra_gbs"),
    (["+hw=h100", "hw.link.inter_gbs=-400"], "hw.link.inter_gbs"),
    (["+hw=h100", "hw.link.efficiency=1.5"], "hw.link.efficiency"),
    (["hw.nodes=0"], "hw.nodes"),
    (["+hw=a100_80g", "hw.device_min_gb=-60"], "hw.device_min_gb"),
    (["+hw=a100_40g", "hw.device_below_gb=0"], "hw.device_below_gb"),
    (["hw.devices=two"], "hw.devices"),
    (["hw.strategy=fsdp"], "hw.strategy"),
    (["cloud.mfu=0"], "cloud.mfu"),
    (["cloud.mfu=1.5"], "cloud.mfu"),
    (["cloud.setup_hours=-1"], "cloud.setup_hours"),
    (["cloud.max_age_days=0"], "cloud.max_age_days"),
    (["cloud.top=0"], "cloud.top"),
    (["cloud.tokens=0"], "cloud.tokens"),
    (["launch.max_restarts=-1"], "launch.max_restarts"),
    (["launch.ray_wait_s=0"], "launch.ray_wait_s"),
    (["hw.headroom.advisory_frac=0"], "hw.headroom.advisory_frac"),
    (["hw.headroom.advisory_frac=1.5"], "hw.headroom.advisory_frac"),
    (["hw.headroom.reserve_gb=-1"], "hw.headroom.reserve_gb"),
    (["hw.headroom.frac=1"], "hw.headroom.frac"),                # memory_needed divides by 1-frac
    (["hw.headroom.frac=-0.1"], "hw.headroom.frac"),
    (["hw.headroom.min_gb=-0.5"], "hw.headroom.min_gb"),
    (["rung.hidden_size=0"], "rung.hidden_size"),
    (["rung.intermediate_size=-768"], "rung.intermediate_size"),
    (["rung.num_hidden_layers=0"], "rung.num_hidden_layers"),
    (["rung.num_attention_heads=0"], "rung.num_attention_heads"),
    (["rung.num_key_value_heads=-2"], "rung.num_key_value_heads"),
    (["rung.head_dim=0"], "rung.head_dim"),
    (["rung.vocab_size=0"], "rung.vocab_size"),
    (["rung.max_position_embeddings=0"], "rung.max_position_embeddings"),
    (["rung.rope_theta=0"], "rung.rope_theta"),
    (["rung.rms_norm_eps=-1e-6"], "rung.rms_norm_eps"),
    *((([f"rung.{k}=-1"], f"rung.{k}")) for k in (
        "num_experts", "num_experts_per_tok", "moe_intermediate_size",
        "shared_expert_intermediate_size", "linear_attention_layers", "linear_num_key_heads",
        "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
        "linear_conv_kernel_dim")),
    (["rung.lora_lr=0"], "rung.lora_lr"),
    (["rung.full_lr=-1e-5"], "rung.full_lr"),
    (["rung.global_batch=0"], "rung.global_batch"),
    (["spoke.min_rating=-1"], "spoke.min_rating"),
    (["spoke.min_rating=6"], "spoke.min_rating"),
    (["spoke.seq_len_hint=0"], "spoke.seq_len_hint"),
    (["data=file", "data.path=x.jsonl", "data.min_rating=6"], "data.min_rating"),
    (["data=file", "data.path=x.jsonl", "data.eval_fraction=0"], "data.eval_fraction"),
    (["data=file", "data.path=x.jsonl", "data.eval_fraction=1"], "data.eval_fraction"),
    (["data=file", "data.path=x.jsonl", "data.decontam_n=-1"], "data.decontam_n"),
    (["data=file", "data.path=x.jsonl", "data.decontam_threshold=0"], "data.decontam_threshold"),
    (["data=file", "data.path=x.jsonl", "data.format=chatml"], "data.format"),
    (["data=file", "data.path=x.jsonl", "data.collateral=other"], "data.collateral"),
    (["data=hf", "data.name=x/y", "data.source=s3"], "data.source"),
    (["spoke.sources.1.weight=-0.25"], "spoke.sources[1].weight"),
    (["lane.lora.r=0"], "lane.lora.r"),
    (["lane.lora.alpha=-32"], "lane.lora.alpha"),
    (["lane.lora.dropout=1"], "lane.lora.dropout"),
    (["lane.lora.dropout=-0.1"], "lane.lora.dropout"),
    ([*QLORA, "lane.quantization.blocksize=0"], "lane.quantization.blocksize"),
    ([*QLORA, "lane.quantization.blocksize=128"], "lane.quantization.blocksize"),   # training: 64
    (["lane.optimizer.weight_decay=-0.01"], "lane.optimizer.weight_decay"),
    (["lane.optimizer.betas=[0.9,1.5]"], "lane.optimizer.betas[1]"),
    (["lane.optimizer.betas=[-0.1,0.999]"], "lane.optimizer.betas[0]"),
    (["lane.optimizer.betas=[0.9]"], "lane.optimizer.betas"),
    (["lane.optimizer.lr=nan"], "lane.optimizer.lr"),
    ([*DPO, "lane.dpo.beta=0"], "lane.dpo.beta"),
    ([*DPO, "lane.dpo.beta=-0.1"], "lane.dpo.beta"),
    (["lane=orpo", "spoke=skill_creation", "lane.orpo.beta=0"], "lane.orpo.beta"),
    (["lane=simpo", "spoke=skill_creation", "lane.simpo.beta=0"], "lane.simpo.beta"),
    (["lane=simpo", "spoke=skill_creation", "lane.simpo.gamma_beta_ratio=-1"],
     "lane.simpo.gamma_beta_ratio"),
    (["lane=kto", "spoke=skill_creation", "lane.kto.beta=0"], "lane.kto.beta"),
    (["lane=kto", "lane.kto.desirable_weight=0"], "lane.kto.desirable_weight"),
    (["lane=kto", "lane.kto.undesirable_weight=-1"], "lane.kto.undesirable_weight"),
    (["lane=grpo", "lane.grpo.num_generations=1"], "lane.grpo.num_generations"),
    (["lane=grpo", "lane.grpo.max_completion_length=0"], "lane.grpo.max_completion_length"),
    (["lane=grpo", "lane.grpo.temperature=0"], "lane.grpo.temperature"),
    (["lane=grpo", "lane.grpo.beta=-0.1"], "lane.grpo.beta"),
    (["lane=grpo", "lane.grpo.epsilon=1"], "lane.grpo.epsilon"),
    (["lane=grpo", "lane.grpo.epsilon_high=0"], "lane.grpo.epsilon_high"),
    (["lane=grpo", "lane.grpo.format_reward=-1"], "lane.grpo.format_reward"),
    (["lane=grpo", "lane.grpo.oracle_timeout_s=0"], "lane.grpo.oracle_timeout_s"),
    (["lane=grpo", "lane.grpo.generation_batch_size=0"], "lane.grpo.generation_batch_size"),
    (["lane=distill", "lane.distill.beta=1.5"], "lane.distill.beta"),
    (["lane=distill", "lane.distill.temperature=0"], "lane.distill.temperature"),
    (["lane=distill", "lane.distill.lmbda=-0.1"], "lane.distill.lmbda"),
    (["lane=distill", "lane.distill.max_completion_length=0"], "lane.distill.max_completion_length"),
    (["lane=distill", "lane.distill.teacher=no_such_rung"], "lane.distill.teacher"),
    (["lane=grpo", "lane.grpo.importance_sampling_clip_max=0"],
     "lane.grpo.importance_sampling_clip_max"),
    (["curriculum.epochs=0"], "curriculum.epochs"),
    (["curriculum.caps=[0,7,10]"], "curriculum.caps[0]"),
    (["curriculum.caps=[4,7,11]"], "curriculum.caps[2]"),
    (["curriculum.caps=[]"], "curriculum.caps"),
    (["curriculum.pack_window=-1"], "curriculum.pack_window"),
    (["train.default_global_batch=0"], "train.default_global_batch"),
    (["train.max_steps=0"], "train.max_steps"),
    (["train.max_steps=-2"], "train.max_steps"),
    (["train.warmup_ratio=-0.1"], "train.warmup_ratio"),
    (["train.warmup_ratio=1.5"], "train.warmup_ratio"),
    (["train.grad_clip=-1"], "train.grad_clip"),
    (["train.seed=-1"], "train.seed"),
    (["train.seed=4294967296"], "train.seed"),
    (["train.checkpoint_every=0"], "train.checkpoint_every"),
    (["train.eval_every=-1"], "train.eval_every"),
    (["logger=csv", "logger.kind=tensorbord"], "logger.kind"),
    (["train.eval_max_records=0"], "train.eval_max_records"),
    (["plan.uncalibrated_margin=-0.1"], "plan.uncalibrated_margin"),
    (["serve.port=-1"], "serve.port"),
    (["serve.port=65536"], "serve.port"),
    (["serve.max_tokens=0"], "serve.max_tokens"),
    (["serve.max_body_bytes=0"], "serve.max_body_bytes"),
    (["serve.max_header_bytes=-1"], "serve.max_header_bytes"),
    (["serve.max_queue=-1"], "serve.max_queue"),
    (["serve.max_batch_tokens=0"], "serve.max_batch_tokens"),
    (["gate.max_prompts=0"], "gate.max_prompts"),
    (["gate.max_new_tokens=0"], "gate.max_new_tokens"),
    (["gate.min_gain=2"], "gate.min_gain"),
    (["gate.max_regression=-1"], "gate.max_regression"),
    (["eval.k=-1"], "eval.k"),
    (["eval.confidence=1.5"], "eval.confidence"),
    (["gate.k=0"], "gate.k"),
    (["eval.max_prompts=0"], "eval.max_prompts"),
    (["eval.min_items=0"], "eval.min_items"),
    (["eval.temperature=-1"], "eval.temperature"),
    (["eval.top_p=0"], "eval.top_p"),
    (["eval.max_new_tokens=0"], "eval.max_new_tokens"),
    (["eval.judge_prompts=0"], "eval.judge_prompts"),
    (["eval.bootstrap=10"], "eval.bootstrap"),
    (["eval.num_fewshot=-1"], "eval.num_fewshot"),
    (["eval.limit=0"], "eval.limit"),
    (["eval.max_length=0"], "eval.max_length"),
    (["eval.seed=-1"], "eval.seed"),
    (["studio.port=70000"], "studio.port"),
    (["studio.max_body_bytes=0"], "studio.max_body_bytes"),
    (["afk.max_attempts=0"], "afk.max_attempts"),
    (["afk.nice=20"], "afk.nice"),
    (["afk.nice=-1"], "afk.nice"),
    (["afk.memory_factor=0.5"], "afk.memory_factor"),
    (["afk.memory_overhead_gb=-1"], "afk.memory_overhead_gb"),
    (["afk.poll_s=0"], "afk.poll_s"),
    (["compare.prompts=0"], "compare.prompts"),
    (["compare.max_tokens=-5"], "compare.max_tokens"),
    (["calibrate.steps=0"], "calibrate.steps"),
    (["calibrate.steps=1"], "calibrate.steps"),                  # step 2: first with Adam state
    (["calibrate.eval_records=0"], "calibrate.eval_records"),
    (["calibrate.max_rss_gb=0"], "calibrate.max_rss_gb"),
    (["calibrate.max_predicted_gb=-1"], "calibrate.max_predicted_gb"),
    (["calibrate.timeout_s=0"], "calibrate.timeout_s"),
    (["teacher.concurrency=0"], "teacher.concurrency"),
    (["teacher.max_retries=-1"], "teacher.max_retries"),
    (["teacher.backoff_s=-1"], "teacher.backoff_s"),
    (["teacher.timeout_s=0"], "teacher.timeout_s"),
    (["teacher.temperature=2.5"], "teacher.temperature"),
    (["teacher.max_tokens=0"], "teacher.max_tokens"),
    (["teacher.candidates.0.price_in_per_mtok=-1"], "teacher.candidates[0].price_in_per_mtok"),
    (["teacher=genius", "teacher.candidates.2.price_out_per_mtok=-0.5"],
     "teacher.candidates[2].price_out_per_mtok"),
    (["teacher.tier=cheap"], "teacher.tier"),
    (["tree.depth=0"], "tree.depth"),
    (["tree.branching=0"], "tree.branching"),
    (["synth.per_leaf=0"], "synth.per_leaf"),
    (["synth.repair_turns=-1"], "synth.repair_turns"),
    (["synth.seed_examples=0"], "synth.seed_examples"),
    (["synth.seed=-1"], "synth.seed"),
    (["synth.oracle_timeout_s=0"], "synth.oracle_timeout_s"),
    (["synth.oracle_memory_mb=8"], "synth.oracle_memory_mb"),
    (["synth.strategy=many_shot"], "synth.strategy"),
    (["curate.min_rating=6"], "curate.min_rating"),
    (["curate.rating=0"], "curate.rating"),
    (["curate.near_dup=0"], "curate.near_dup"),
    (["curate.near_dup_n=0"], "curate.near_dup_n"),
    (["curate.verdict=failed"], "curate.verdict"),
    # choices
    ([*DPO, "lane.dpo.loss=kto"], "lane.dpo.loss"),
    ([*DPO, "lane.dpo.loss=sigmod"], "lane.dpo.loss"),
    ([*QLORA, "lane.quantization.type=int4"], "lane.quantization.type"),
    (["hw.lightning.precision=bf16"], "hw.lightning.precision"),
    (["serve.device=gpu"], "serve.device"),
    (["serve.dtype=int8"], "serve.dtype"),
    (["spoke.sources.0.kind=pairs"], "spoke.sources[0].kind"),
    (["lane=grpo", "lane.grpo.loss_type=ppo"], "lane.grpo.loss_type"),
    (["lane=grpo", "lane.grpo.reward=judge"], "lane.grpo.reward"),
    (["lane=grpo", "lane.grpo.generation=vllm"], "lane.grpo.generation"),
    (["lane=grpo", "lane.grpo.importance_sampling_mode=token"], "lane.grpo.importance_sampling_mode"),
    (["lane.method=dpo"], "lane.method"),
    (["lane.objective=rlhf"], "lane.objective"),
    # a retired key with a value it never had
    (["lane.kind=ppo"], "lane.kind"),
]


@pytest.mark.parametrize("overrides, key", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_values_name_the_key(compose, overrides, key):
    with pytest.raises(ConfigError) as e:
        compose(overrides)
    err = e.value
    assert err.code == 2 and err.key == key, err.message
    assert f"`{key}" in err.message and "\n" not in err.message
    assert "is not valid" in err.message or "needs a" in err.message


def test_range_errors_say_what_is_valid_and_give_an_example(compose):
    with pytest.raises(ConfigError) as e:
        compose(["+hw=cpu", "hw.memory_gb=-3"])
    assert e.value.message.startswith("`hw.memory_gb=-3` is not valid: it takes a positive number")
    assert "(e.g. `hw.memory_gb=24`)" in e.value.message
    with pytest.raises(ConfigError) as e:
        compose(["spoke.sources.1.weight=-1"])
    assert "(e.g. `spoke.sources.1.weight=0.5`)" in e.value.message   # Hydra's override form
    with pytest.raises(ConfigError) as e:
        compose([*DPO, "lane.dpo.loss=sigmod"])
    assert "did you mean `sigmoid`" in e.value.message and "hinge" in e.value.message


GOOD = [
    ["train.max_steps=-1"],                     # run the curriculum's epochs
    ["train.max_steps=1"],
    ["serve.port=0"],                           # any free port
    ["serve.port=65535"],
    ["+hw=cpu", "hw.memory_gb=null"],           # detect
    ["+hw=cpu", "hw.memory_gb=0.5"],
    ["train.eval_max_records=null", "rung.global_batch=null", "calibrate.max_rss_gb=null"],
    ["train.grad_clip=0"],                      # clipping off
    ["spoke.sources.0.weight=0"],               # a source left out
    ["hw.headroom.frac=0", "hw.headroom.min_gb=0", "hw.headroom.reserve_gb=0"],
    ["hw.headroom.advisory_frac=1"],
    ["lane.lora.dropout=0.5", "lane.optimizer.betas=[0,0.999]", "lane.optimizer.weight_decay=0"],
    ["curriculum=three_epoch", "curriculum.caps=[10]"],   # epochs past the last cap keep it
    ["curriculum.caps=[1,10,5]"],
    ["train.seed=4294967295", "train.warmup_ratio=0", "spoke.min_rating=0"],
    ["train.warmup_ratio=1", "spoke.min_rating=5", "calibrate.steps=2"],
    ["lane=full"],                              # no lora section: its rules are skipped
    ["lane=qlora", "lane.quantization.type=fp4"],
    [*DPO, "lane.dpo.loss=hinge"],
    [*DPO, "lane.dpo.loss=ipo", "lane.dpo.beta=0.5"],
    ["lane.dpo.beta=-1"],                        # not the lane's objective: not read, not checked
    ["lane=grpo", "lane.grpo.epsilon_high=null", "lane.grpo.beta=0"],
    ["lane=full", "lane.objective=dpo", "spoke=skill_creation"],
    ["lane=dpo", "lane.method=qlora", "spoke=skill_creation"],   # nf4: the schema's defaults
    ["lane=lora", "lane.quantization.blocksize=32"],   # method lora: quantization is not read
    ["serve.device=cpu", "serve.dtype=bf16", "hw.lightning.precision=16-mixed"],
]


@pytest.mark.parametrize("overrides", GOOD, ids=[" ".join(o) for o in GOOD])
def test_legitimate_values_and_sentinels_pass(compose, overrides):
    compose(overrides)


def test_plan_cli_exits_2_naming_the_key(mens_cli):
    p = mens_cli("mens.plan", "+hw=cpu", "hw.memory_gb=-3")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "`hw.memory_gb=-3` is not valid" in p.stderr
    assert "Traceback" not in p.stderr


# --- the table covers the schema ----------------------------------------------------------
def _numeric_keys(cls=schema.MensConfig, prefix: str = ""):
    """Every int/float field of the schema (Optional or not), list items as `[]`."""
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        t, key = hints[f.name], prefix + f.name
        args = [a for a in typing.get_args(t) if a is not type(None)]
        if typing.get_origin(t) is typing.Union and len(args) == 1:
            t = args[0]                                        # Optional[X] → X
        if typing.get_origin(t) in (list, typing.List):
            (t,) = typing.get_args(t)
            key += "[]"
        if is_dataclass(t):
            yield from _numeric_keys(t, key + ".")
        elif t in (int, float):
            yield key


def test_every_numeric_schema_field_has_a_rule():
    from mens.config.validate import RANGES

    numeric = set(_numeric_keys())
    assert "hw.memory_gb" in numeric and "spoke.sources[].weight" in numeric   # the walk works
    missing = numeric - set(RANGES)
    assert not missing, f"give these numbers a rule in mens.config.validate.RANGES: {missing}"
    assert not set(RANGES) - numeric, "a rule for a key the schema does not define"


def test_every_rule_has_a_failing_case_here():
    from mens.config.validate import CHOICES, RANGES

    tried = {re.sub(r"\[\d+\]", "[]", key) for _, key in BAD}
    for key in [*RANGES, "lane.dpo.loss", "lane.grpo.loss_type", "lane.grpo.reward",
                "lane.method", "lane.objective", "lane.quantization.type", "serve.device",
                "serve.dtype", "hw.lightning.precision", "spoke.sources[].kind", "data.format",
                "data.collateral", "data.source"]:
        assert key in tried, f"no BAD case for {key}"
        assert key in RANGES or key in CHOICES


def test_dpo_loss_choices_are_the_implemented_ones(compose):
    from mens.config.validate import CHOICES

    assert CHOICES["lane.dpo.loss"] == list(schema.DPO_LOSSES) == ["sigmoid", "hinge", "ipo"]
    for loss in schema.DPO_LOSSES:
        assert compose([*DPO, f"lane.dpo.loss={loss}"]).lane.dpo.loss == loss


# --- the DPO losses, on hand-made numbers (no model is trained) ---------------------------
CHOSEN = [1.0, -0.5, 0.2, 3.0]      # log π(y_w|x) − log π_ref(y_w|x)
REJECTED = [0.3, 0.4, -1.0, -2.0]   # log π(y_l|x) − log π_ref(y_l|x)


@pytest.mark.parametrize("beta", [0.1, 0.5, 2.0])
@pytest.mark.parametrize("loss", ["sigmoid", "hinge", "ipo"])
def test_dpo_losses_match_their_formulas(loss, beta):
    import torch

    from mens.objective.dpo import dpo_losses

    formula = {
        "sigmoid": lambda h: -math.log(1 / (1 + math.exp(-beta * h))),   # −log σ(β·h)
        "hinge": lambda h: max(0.0, 1 - beta * h),                       # relu(1 − β·h)
        "ipo": lambda h: (h - 1 / (2 * beta)) ** 2,                      # (h − 1/(2β))²
    }[loss]
    got = dpo_losses(torch.tensor(CHOSEN, dtype=torch.float64),
                     torch.tensor(REJECTED, dtype=torch.float64), beta, loss)
    want = [formula(c - r) for c, r in zip(CHOSEN, REJECTED)]
    assert got.shape == (len(CHOSEN),)
    assert got.tolist() == pytest.approx(want, rel=1e-12, abs=1e-12)


def test_dpo_losses_differ_and_unknown_is_refused():
    import torch

    from mens.objective.dpo import dpo_losses

    c, r = torch.tensor(CHOSEN), torch.tensor(REJECTED)
    values = {k: dpo_losses(c, r, 0.1, k).mean().item() for k in schema.DPO_LOSSES}
    assert len(set(values.values())) == 3, values     # each name runs its own loss
    with pytest.raises(ConfigError) as e:
        dpo_losses(c, r, 0.1, "kto")
    assert e.value.key == "lane.dpo.loss"


def test_sigmoid_path_is_bit_identical_to_the_former_expression():
    import torch
    import torch.nn.functional as F

    from mens.objective.dpo import dpo_losses

    g = torch.Generator().manual_seed(0)
    logps, ref = torch.randn(8, generator=g) * 40, torch.randn(4, 2, generator=g) * 40
    beta, n = 0.1, 4
    # mens before lane.dpo.loss was read: the loss every dpo run minimised
    former = -F.logsigmoid(beta * (logps[:n] - ref[:, 0]) - beta * (logps[n:] - ref[:, 1])).mean()
    now = dpo_losses(logps[:n] - ref[:, 0], logps[n:] - ref[:, 1], beta, "sigmoid").mean()
    assert torch.equal(former, now)


def _fixed_logits(logits):
    """Stands in for the policy: the same logits whatever the input (no model, no training)."""
    from types import SimpleNamespace

    import torch

    class Fixed(torch.nn.Module):
        def forward(self, **_):
            return SimpleNamespace(logits=logits)
    return Fixed()


@pytest.mark.filterwarnings("ignore:You are trying to `self.log")
@pytest.mark.parametrize("loss", ["sigmoid", "hinge", "ipo"])
def test_module_dpo_loss_uses_the_chosen_loss_and_ipo_averages_over_tokens(loss):
    """The dpo objective's step, called as MensModule calls it, on a 1-pair batch: sums of token log-probs for sigmoid/hinge, per-token
    means for ipo (TRL's IPO), the reference treated the same way."""
    import torch
    import torch.nn.functional as F
    from types import SimpleNamespace

    from mens.data.pack import IGNORE
    from mens.train.datamodule import Position
    from mens.objective.dpo import Dpo
    from mens.train.module import MensModule

    torch.manual_seed(0)
    vocab, beta = 7, 0.5
    logits = torch.randn(2, 5, vocab, dtype=torch.float32)
    # chosen row: 3 supervised tokens; rejected row: 2 (labels are shifted by one inside)
    labels = torch.tensor([[IGNORE, 2, 4, 1, IGNORE], [IGNORE, IGNORE, 3, 5, IGNORE]])
    batch = {"input_ids": torch.zeros(2, 5, dtype=torch.long), "labels": labels,
             "attention_mask": torch.ones(2, 5, dtype=torch.long),
             "position_ids": torch.arange(5).expand(2, 5), "pair_index": torch.tensor([0])}
    ref = torch.tensor([[-6.0, -2.5]])                  # summed reference log-probs of pair 0
    spec = SimpleNamespace(lane=SimpleNamespace(dpo=SimpleNamespace(beta=beta, loss=loss)))
    module = MensModule(_fixed_logits(logits), spec, Position(), 1, objective=Dpo(spec, ref))

    loss_t, metrics = module.objective.step(module.step_context(None, None, 1, 1), batch)
    got = loss_t.item()

    logp = F.log_softmax(logits[:, :-1].double(), -1)
    tok = [[(t, int(labels[row, t + 1])) for t in range(4) if labels[row, t + 1] != IGNORE]
           for row in (0, 1)]
    sums = [sum(logp[row, t, y].item() for t, y in tok[row]) for row in (0, 1)]
    counts = [len(tok[0]), len(tok[1])]
    assert counts == [3, 2]
    if loss == "ipo":
        h = (sums[0] / 3 - ref[0, 0].item() / 3) - (sums[1] / 2 - ref[0, 1].item() / 2)
        want = (h - 1 / (2 * beta)) ** 2
    else:
        h = (sums[0] - ref[0, 0].item()) - (sums[1] - ref[0, 1].item())
        want = -math.log(1 / (1 + math.exp(-beta * h))) if loss == "sigmoid" \
            else max(0.0, 1 - beta * h)
    assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert metrics["loss"].item() == got
    assert metrics["rewards/margins"].item() == pytest.approx(beta * h, rel=1e-5, abs=1e-6)
