"""Training the families of issue #40 (mixtures of experts, Phi-3, Qwen3.5) on tiny random models
(tests/families_util): LoRA lands on each family's own layers (Phi-3's fused qkv_proj, a MoE's
router) and, with lane.lora.experts=true, on every expert — each expert that received tokens
gets a gradient and one that received none gets none; the trainable count is PEFT's own and the
plan's; the router's load-balancing loss equals transformers' and is counted once; Qwen3.5's
packed rows leak across records through its linear attention (the family's no_packing reason,
measured), so the trainer pads them; and mens's real training lowers every family's loss."""
from __future__ import annotations

import json

import pytest
import torch

from families_util import make_model, make_tokenizer
from mens.config.schema import LaneConfig, LoraConfig
from mens.errors import ConfigError
from mens.model.load import apply_lane, trainable_count

MOE = ["qwen3_moe", "mixtral", "gpt_oss", "qwen3_5_moe_text"]
DENSE = ["phi3", "qwen3_5_text"]
R = 4


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # tiny models: intra-op threads only fight the other workers
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """family → a directory with its tiny random model and tokenizer (built once)."""
    made = {}

    def get(family):
        if family not in made:
            d = tmp_path_factory.mktemp(family)
            make_model(family, d, len(make_tokenizer(family, d)))
            made[family] = d
        return made[family]
    return get


def lane(experts=False, **lora):
    return LaneConfig(name="t", method="lora", lora=LoraConfig(r=R, experts=experts, **lora),
                      gradient_checkpointing=False)


def load(path):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)


def peft_count(model) -> int:
    """The adapter's size from the wrapped layers' shapes: r·(in + out) per Linear or 2-D weight,
    E·r·(in + out) per fused 3-D expert weight [E, a, b] (PEFT's ParamWrapper: one lora_A/lora_B
    pair per expert, stacked)."""
    from peft.tuners.lora.layer import LoraLayer, ParamWrapper

    n = 0
    for m in model.modules():
        if isinstance(m, ParamWrapper):
            shape = m.get_param().shape
            e, a, b = shape if len(shape) == 3 else (1, *shape)
            n += e * R * (a + b)
        elif isinstance(m, LoraLayer):
            n += R * (m.in_features + m.out_features)
    return n


@pytest.mark.parametrize("family", MOE + DENSE)
def test_lora_lands_on_the_familys_layers_and_counts_exactly(family, tiny):
    notes: list[str] = []
    experts = family in MOE
    model = apply_lane(load(tiny(family)), lane(experts), notes=notes)
    from mens.source.families import FAMILIES

    fam = FAMILIES[family]
    wrapped = {n.split(".")[-1] for n, m in model.named_modules() if hasattr(m, "lora_A")}
    # the fused experts' wrappers nest under `experts`; every default target is there
    assert set(fam.lora_targets) <= wrapped and (("experts" in wrapped) == experts)
    assert any(f"gets LoRA targets {list(fam.lora_targets)}" in n for n in notes), notes
    trainable, _ = trainable_count(model)
    assert trainable == peft_count(model) > 0
    if experts:   # the fused 3-D weights: each expert's pair is E·r·(in + out) of the total
        assert any("experts adapted" in n for n in notes)
        without = trainable_count(apply_lane(load(tiny(family)), lane(False)))[0]
        e = load(tiny(family)).config
        n_exp = getattr(e, "num_experts", None) or e.num_local_experts
        assert trainable - without == sum(
            n_exp * R * (p.shape[1] + p.shape[2]) for n, p in load(tiny(family)).named_parameters()
            if n.endswith(("experts.gate_up_proj", "experts.down_proj")))


@pytest.mark.parametrize("family", MOE + DENSE)
def test_the_trainable_count_equals_the_plans(family, tiny):
    """Arch.lora_params(r, targets, experts=…) — the planner's count (mens/plan/memory.py) —
    equals the adapter PEFT builds."""
    from mens.plan.memory import Arch
    from mens.source.families import FAMILIES, read_config

    arch = Arch.of(read_config(tiny(family)))
    model = apply_lane(load(tiny(family)), lane(family in MOE))
    assert arch.lora_params(R, FAMILIES[family].lora_targets, experts=family in MOE) == \
        trainable_count(model)[0]


def test_experts_on_a_dense_family_and_dropout_on_a_router_are_config_errors(tiny):
    with pytest.raises(ConfigError) as e:
        apply_lane(load(tiny("phi3")), lane(True))
    assert e.value.key == "lane.lora.experts" and "dense" in e.value.message
    with pytest.raises(ConfigError) as e:   # PEFT's ParamWrapper has no dropout
        apply_lane(load(tiny("qwen3_moe")), lane(False, dropout=0.05, router=True))
    assert e.value.key == "lane.lora.dropout" and "gate" in e.value.message
    with pytest.raises(ConfigError) as e:   # a name outside the family's linear layers
        apply_lane(load(tiny("phi3")), lane(False, targets=["q_proj"]))
    assert e.value.key == "lane.lora.targets"


def expert_grads(model):
    """layer → expert → whether any of its LoRA weights (both fused tensors) has a grad ≠ 0.
    PEFT stacks experts: lora_A (E·r, in) is (E, r, in); lora_B (out, r·E) is (out, r, E)."""
    from peft.tuners.lora.layer import ParamWrapper

    out: dict[int, dict[int, bool]] = {}
    for name, m in model.named_modules():
        if isinstance(m, ParamWrapper) and m.num_experts > 1:
            layer = int(name.split("layers.")[1].split(".")[0])
            a = m.lora_A["default"].weight.grad.reshape(m.num_experts, R, -1)
            b = m.lora_B["default"].weight.grad.reshape(-1, R, m.num_experts)
            for e in range(m.num_experts):
                hit = bool(a[e].abs().sum() > 0) or bool(b[:, :, e].abs().sum() > 0)
                out.setdefault(layer, {}).setdefault(e, False)
                out[layer][e] |= hit
    return out


@pytest.mark.parametrize("family", MOE)
@pytest.mark.parametrize("tokens", [1, 24])
def test_every_expert_that_received_tokens_gets_a_gradient_and_no_other(family, tokens, tiny):
    """One token routes to exactly top-k experts per layer (the others get none); 24 tokens to
    more. The routing is read from the batch's own router logits (LoRA included)."""
    from peft.tuners.lora.layer import ParamWrapper

    model = apply_lane(load(tiny(family)), lane(True))
    with torch.no_grad():   # lora_B starts at 0, which zeroes lora_A's gradient: make both live
        for m in model.modules():
            if isinstance(m, ParamWrapper):
                m.lora_B["default"].weight.normal_(0, 0.02)
    ids = torch.randint(0, 4000, (1, tokens), generator=torch.Generator().manual_seed(3))
    out = model(input_ids=ids, output_router_logits=True)
    (out.logits.float() ** 2).mean().backward()
    k = model.get_base_model().num_experts_per_tok
    routed = {i: set(torch.topk(logits, k, dim=-1).indices.flatten().tolist())
              for i, logits in enumerate(out.router_logits)}
    grads = expert_grads(model)
    assert set(grads) == set(routed)
    for layer, by_expert in grads.items():
        assert {e for e, g in by_expert.items() if g} == routed[layer], (layer, routed, grads)
    if tokens == 1:
        assert all(len(r) == k < len(grads[0]) for r in routed.values())   # some got none


@pytest.mark.parametrize("family", MOE)
def test_the_router_loss_is_transformers_and_the_model_adds_none_itself(family, tiny):
    from mens.train.router import RouterAux

    model = apply_lane(load(tiny(family)), lane(True))
    base = model.get_base_model()
    ids = torch.randint(0, 4000, (2, 16), generator=torch.Generator().manual_seed(5))
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 10:] = 0
    ref = base(input_ids=ids, attention_mask=mask, output_router_logits=True).aux_loss
    router = RouterAux.of(model)   # the published configs' output_router_logits: false
    assert router.adds == (family != "gpt_oss") and router.coef > 0
    router.close()
    model.config.output_router_logits = True   # a config.json asking for it: mens adds it once
    plain = model(input_ids=ids, attention_mask=mask, labels=ids).loss   # CE + coef·aux
    router = RouterAux.of(model)
    assert router.adds and "output_router_logits: true" in router.note
    assert model.config.output_router_logits is False   # the model's forward adds nothing now
    router.start()
    ce = model(input_ids=ids, attention_mask=mask, labels=ids).loss
    aux = router.loss(mask)
    torch.testing.assert_close(aux, ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ce + router.coef * aux, plain, rtol=1e-5, atol=1e-6)
    with torch.no_grad():   # a no-grad pass (a reference, sampling) is not kept
        router.start()
        model(input_ids=ids)
    assert router.loss() is None
    router.close()
    assert model.config.output_router_logits is True and router.routers


@pytest.mark.parametrize("family", ["qwen3_moe", "gpt_oss"])
@pytest.mark.parametrize("loss", ["chunked", "full_logits"])
def test_the_training_step_adds_the_router_loss_once_on_mens_loss_paths(family, loss, tiny):
    """MensModule.training_step on a packed batch (4-D block mask, a padded tail): the loss to
    backward is the causal-LM loss + coef · aux (Qwen3-MoE) or the causal-LM loss alone
    (gpt-oss: logged only), on both of mens's loss paths; aux over the records' tokens."""
    from types import SimpleNamespace as NS

    from mens.data.pack import block_causal_mask
    from mens.objective.sft import Sft
    from mens.train.datamodule import Position
    from mens.train.module import MensModule, lm_loss
    from mens.train.router import RouterAux

    model = apply_lane(load(tiny(family)), lane(True))
    router = RouterAux.of(model)
    spec = NS(train=NS(loss=loss), lane=NS())
    module = MensModule(model, spec, Position(), 1, objective=Sft(spec), router=router)
    ids = torch.randint(0, 4000, (2, 16), generator=torch.Generator().manual_seed(7))
    seg = torch.tensor([[1] * 10 + [2] * 6, [1] * 12 + [0] * 4])
    pos = torch.tensor([[*range(10), *range(6)], [*range(12), *range(4)]])
    mask = block_causal_mask(seg, None if family != "gpt_oss" else torch.float32)
    batch = dict(input_ids=ids, labels=ids.clone(), position_ids=pos, attention_mask=mask)
    out = module.training_step(dict(batch, real_tokens=torch.tensor(28), token_mask=seg != 0), 0)
    ce = lm_loss(model, batch) if loss == "chunked" else model(**batch).loss
    router.start()
    model(**{k: v for k, v in batch.items() if k != "labels"})
    aux = router.loss(seg != 0)
    assert module.last["router_aux_loss"] == pytest.approx(float(aux), rel=1e-5)
    want = ce + router.coef * aux if family != "gpt_oss" else ce
    torch.testing.assert_close(out.detach(), want.detach(), rtol=1e-6, atol=1e-6)
    assert router.coef * float(aux) > 1e-3   # a difference the comparison above would see


def test_the_router_loss_gradient_survives_gradient_checkpointing(tiny):
    """Checkpointed layers recompute their routers in backward: those recomputes are not kept
    (the step's forward is) and the gradients equal the plain path's exactly."""
    from mens.train.router import RouterAux

    grads = []
    for ckpt in (False, True):
        model = apply_lane(load(tiny("mixtral")), LaneConfig(
            name="t", method="lora", lora=LoraConfig(r=R, experts=True),
            gradient_checkpointing=ckpt))
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 0.02, generator=torch.Generator().manual_seed(1))
        model.train()
        router = RouterAux.of(model)
        router.start()
        ids = torch.randint(0, 4000, (2, 16), generator=torch.Generator().manual_seed(2))
        loss = model(input_ids=ids, labels=ids).loss + 0.5 * router.loss()
        loss.backward()
        assert router.kept == []   # the backward's recomputes were not kept
        grads.append({n: p.grad for n, p in model.named_parameters() if p.requires_grad})
    assert grads[0].keys() == grads[1].keys()
    for n in grads[0]:
        torch.testing.assert_close(grads[1][n], grads[0][n], rtol=1e-5, atol=1e-7)


def rows_of(model, a, b, window=True):
    """Token-summed NLL of records a and b: run apart, and packed in one row as mens packs them
    (positions restart at each record, the 4-D block-causal mask, windowed where the model
    slides: mens.train.attention.window_masks)."""
    from mens.data.pack import block_causal_mask, mask_dtype_for
    from mens.train.attention import window_masks, windowed

    def nll(ids, **kw):
        logp = torch.log_softmax(model(input_ids=ids, **kw).logits[:, :-1].float(), -1)
        return -torch.gather(logp, 2, ids[:, 1:, None])[..., 0]          # (1, S-1)

    with torch.no_grad():
        apart = torch.cat([nll(a).sum(-1), nll(b).sum(-1)])
        ids = torch.cat([a, b], 1)
        pos = torch.cat([torch.arange(a.shape[1]), torch.arange(b.shape[1])])[None]
        seg = torch.tensor([[1] * a.shape[1] + [2] * b.shape[1]])
        mask = block_causal_mask(seg, mask_dtype_for(model))
        how = window_masks(model.config, ids.shape[1])
        t = nll(ids, position_ids=pos, attention_mask=windowed(mask, how) if how and window
                else mask)[0]
        packed = torch.stack([t[:a.shape[1] - 1].sum(), t[a.shape[1]:].sum()])  # b's own pairs
    return apart, packed


def test_qwen35_packed_rows_leak_across_records_so_the_trainer_pads_them(tiny):
    """The reason behind qwen3_5's no_packing: its Gated DeltaNet layers run the recurrent state
    along the whole row (transformers' torch path ignores the record boundaries; asked to keep
    them — cu_seq_lens — it refuses without flash-linear-attention). Measured: the first record
    equal to 1e-5, the second's summed NLL off by ~100 nats (tiny model, seed 0)."""
    from mens.train.datamodule import packing_refusal
    from mens.source.families import FAMILIES

    model = load(tiny("qwen3_5_text")).eval()
    g = torch.Generator().manual_seed(1)
    a, b = torch.randint(0, 4000, (1, 20), generator=g), torch.randint(0, 4000, (1, 28), generator=g)
    apart, packed = rows_of(model, a, b)
    assert abs(packed[0] - apart[0]) < 1e-3   # nothing before the first record to leak
    assert abs(packed[1] - apart[1]) > 1.0    # the second sees the first through the state
    with pytest.raises(ValueError, match="flash-linear-attention"):
        cu = torch.tensor([0, 20, 48], dtype=torch.int32)
        model(input_ids=torch.cat([a, b], 1), cu_seq_lens_q=cu, cu_seq_lens_k=cu,
              max_length_q=28, max_length_k=28)
    assert packing_refusal(model) == FAMILIES["qwen3_5_text"].no_packing != ""
    assert packing_refusal(load(tiny("qwen3_moe"))) == ""
    # the control: a family without linear attention packs exactly
    apart, packed = rows_of(load(tiny("mixtral")).eval(), a, b)
    torch.testing.assert_close(packed, apart, rtol=1e-5, atol=1e-4)


def test_per_record_attention_is_exact_for_mixtral_and_refused_for_gpt_oss(tiny):
    """Mixtral without a sliding window (its published config has none) attends per record as
    the block mask does; gpt-oss (sinks, sliding windows) keeps the block mask, and says why."""
    from mens.train.attention import use_packed_attention

    g = torch.Generator().manual_seed(2)
    a, b = torch.randint(0, 4000, (1, 20), generator=g), torch.randint(0, 4000, (1, 28), generator=g)
    mixtral = load(tiny("mixtral")).eval()
    apart, _ = rows_of(mixtral, a, b)
    assert use_packed_attention(mixtral, 128)[0]
    with torch.no_grad():
        ids = torch.cat([a, b], 1)
        pos = torch.cat([torch.arange(20), torch.arange(28)])[None]
        logp = torch.log_softmax(mixtral(input_ids=ids, position_ids=pos).logits[:, :-1], -1)
        t = -torch.gather(logp, 2, ids[:, 1:, None])[0, :, 0]
    torch.testing.assert_close(torch.stack([t[:19].sum(), t[20:].sum()]), apart, rtol=1e-5,
                               atol=1e-4)
    ok, why = use_packed_attention(load(tiny("gpt_oss")), 128)
    assert not ok and "sinks" in why


@pytest.mark.parametrize("family", ["gpt_oss", "gemma2", "gemma3_text", "mixtral"])
def test_packed_rows_keep_the_sliding_window(family, tiny):
    """transformers passes a ready 4-D mask to sliding layers unchanged: the block mask alone
    lets them see a whole record (the control: packed ≠ apart). Windowed as the trainer
    windows it — a mask per layer type (gpt-oss, Gemma) or the one mask (Mixtral with a
    window, every layer) — packed rows equal the records run alone. Windows of 8 tokens,
    records of 20 and 28."""
    model = load(tiny(family)).eval()
    if family == "mixtral":   # the tiny one has no window (as Mixtral-8x7B): give it one
        model.config.sliding_window = 8
    g = torch.Generator().manual_seed(4)
    a, b = torch.randint(0, 4000, (1, 20), generator=g), torch.randint(0, 4000, (1, 28), generator=g)
    apart, packed = rows_of(model, a, b)
    torch.testing.assert_close(packed, apart, rtol=1e-5, atol=1e-3)
    _, unwindowed = rows_of(model, a, b, window=False)
    assert (unwindowed - apart).abs().max() > 0.1


def test_an_adapter_on_the_experts_saves_and_reloads_as_init_adapter(tiny, tmp_path):
    """The expert LoRA is in adapter_model.safetensors, and train.init_adapter's reload
    (PeftModel.from_pretrained in apply_lane) gives back the same trainable weights."""
    from safetensors.torch import load_file

    model = apply_lane(load(tiny("qwen3_moe")), lane(True))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.requires_grad:
                p.normal_(0, 0.02)
    model.save_pretrained(str(tmp_path / "ad"))
    saved = load_file(str(tmp_path / "ad" / "adapter_model.safetensors"))
    assert sum("experts" in k for k in saved) == 2 * 2 * 2   # 2 layers × 2 fused × A/B
    cfg = json.loads((tmp_path / "ad" / "adapter_config.json").read_text())
    assert set(cfg["target_parameters"]) >= {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"}
    again = apply_lane(load(tiny("qwen3_moe")), lane(True), init_adapter=str(tmp_path / "ad"))
    mine = {n: p for n, p in model.named_parameters() if p.requires_grad}
    theirs = {n: p for n, p in again.named_parameters() if p.requires_grad}
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[n], theirs[n]) for n in mine)


# ---- mens's real training (+rung=hf rung.path=…): ~2 s a family once torch is warm ------------
# Qwen3-MoE (experts, router loss added) and Qwen3.5 (packing refused) in the fast suite; the
# others in the slow one (`make test-full`), to keep `make test` within its budget
SLOW = pytest.mark.slow


@pytest.mark.parametrize("family", ["qwen3_moe", "qwen3_5_text",
                                    *(pytest.param(f, marks=SLOW) for f in
                                      ("mixtral", "gpt_oss", "qwen3_5_moe_text", "phi3"))])
def test_real_training_lowers_the_loss(family, tiny, tmp_path):
    from train_util import FAST_TRAIN
    from userdata import chat_records, write_jsonl

    from mens.config.compose import compose
    from mens.plan.output import plan_run
    from mens.run.telemetry import Event, read
    from mens.train.run import train_run

    data = write_jsonl(tmp_path / "chat.jsonl", chat_records(120))
    cfg = compose([*FAST_TRAIN, "+rung=hf", f"rung.path={tiny(family)}", "data=file",
                   f"data.path={data}", "data.collateral=none", "train.max_steps=8",
                   "train.seq_len=128", "lane.optimizer.lr=1e-2", "train.eval_max_records=8",
                   "data.eval_fraction=0.1", f"lane.lora.experts={str(family in MOE).lower()}"])
    spec, plan = plan_run(cfg, tmp_path / "run", "train")
    summary = train_run(spec, plan, tmp_path / "run")
    rows = read(tmp_path / "run" / "telemetry.jsonl")
    steps = [r for r in rows if r["event"] == Event.TRAIN_STEP]
    notes = [r["detail"] for r in rows if r["event"] == Event.NOTE]
    assert len(steps) == 8 and steps[-1]["loss"] < steps[0]["loss"] - 1.0
    assert summary["eval_loss_adapter"] < summary["eval_loss_base"]
    assert summary["trainable_params"] == trainable_count(apply_lane(load(tiny(family)),
                                                                     spec.lane))[0]
    if family in MOE:   # logged every step; added (a note says which) where the family trains with it
        assert all(r["router_aux_loss"] > 0 for r in steps)
        assert any(n.startswith("router:") and ("is added to" in n) == (family != "gpt_oss")
                   for n in notes), notes
    else:
        assert not any("router_aux_loss" in r for r in steps)
    paths = next(r for r in rows if r["event"] == Event.PATHS)
    if family == "qwen3_5_text":   # packing off: by the plan, or by the trainer (and said)
        assert paths["attention"] == "padded"
        assert not spec.train.packing or any(n.startswith("FALLBACK packing") for n in notes)
