"""mens.objective's ORPO, SimPO and KTO losses, and mens's DPO loss, equal TRL's (issue 28: value
≤ 1e-5 relative, gradients ≤ 1e-4), TRL being the reference (1.16 when written; a dev dependency).

(a) seeded random log-probs through our function and TRL's own loss method, called on a real
    trainer object; (b) end to end on a tiny random Qwen3: TRL's trainer tokenizes and collates
    two pairs, its compute_loss runs on them, and our log-probs (one concatenated forward, as
    TRL's) go through our function — loss and every parameter's gradient compared.
Each test also shows that β moved by 1 % breaks the agreement, so a loss that drifted from TRL's
fails here (the check is not blind)."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

trl = pytest.importorskip("trl", reason="TRL is the reference these losses are checked against "
                                        "(pip install -e .[dev])")
import transformers  # noqa: E402
from datasets import Dataset  # noqa: E402
from trl import DPOConfig, DPOTrainer, KTOConfig, KTOTrainer  # noqa: E402
from trl.experimental.cpo import CPOConfig, CPOTrainer  # noqa: E402
from trl.experimental.orpo import ORPOConfig, ORPOTrainer  # noqa: E402

from mens.objective.kto import kto_kl, kto_losses  # noqa: E402
from mens.objective.orpo import orpo_losses  # noqa: E402
from mens.objective.simpo import simpo_losses  # noqa: E402
from mens.resources import ASSETS  # noqa: E402
from mens.config.schema import DPO_LOSSES  # noqa: E402
from mens.objective.dpo import dpo_losses  # noqa: E402

VALUE_RTOL, GRAD_ATOL = 1e-5, 1e-4     # issue 28's acceptance bounds
PAIRS = [dict(prompt="def add(a, b):", chosen="\n    return a + b\n", rejected=" pass"),
         dict(prompt="echo hello", chosen=" world", rejected=" | rm -rf /tmp/x && ls")]
# the same two pairs as four unpaired KTO records (2 desirable, 2 undesirable)
RECORDS = [dict(prompt=p["prompt"], completion=p[k], label=k == "chosen")
           for p in PAIRS for k in ("chosen", "rejected")]
MEASURED: dict[str, float] = {}   # worst differences seen, printed at the end (pytest -s)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach(), b.detach()
    return float((a.double() - b.double()).abs().max() / b.double().abs().max().clamp(min=1e-12))


def grad_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x.double() - y.double()).abs().max()) for x, y in zip(a, b))


def note(name: str, value: float):
    MEASURED[name] = max(MEASURED.get(name, 0.0), value)


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    print("\nmeasured worst differences:",
          ", ".join(f"{k}={v:.2e}" for k, v in sorted(MEASURED.items())))


@pytest.fixture(scope="module")
def tok():
    return transformers.AutoTokenizer.from_pretrained(str(ASSETS / "tiny"))   # pad <|endoftext|>


def tiny_model(vocab: int, seed: int):
    """A random 2-layer Qwen3 (hidden 64), float32: big enough for attention and padding to
    matter, small enough that a forward/backward is milliseconds."""
    torch.manual_seed(seed)
    cfg = transformers.Qwen3Config(vocab_size=vocab, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, head_dim=16,
                                   tie_word_embeddings=False, initializer_range=0.1)
    return transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)


def common(tmp_path, rows, **kw):
    """TrainingArguments for a CPU float32 run that takes the whole fixed batch at once."""
    return dict(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none",
                per_device_train_batch_size=len(rows), max_length=64, **kw)


@pytest.fixture(scope="module")
def orpo(tok, tmp_path_factory):
    model = tiny_model(len(tok), 0)
    args = ORPOConfig(**common(tmp_path_factory.mktemp("orpo"), rows=PAIRS, beta=0.1))
    return ORPOTrainer(model=model, args=args, train_dataset=Dataset.from_list(PAIRS),
                       processing_class=tok)


@pytest.fixture(scope="module")
def simpo(tok, tmp_path_factory):
    model = tiny_model(len(tok), 0)
    # TRL 1.16's SimPO: the CPO trainer, loss_type simpo, cpo_alpha 0 (no NLL term)
    args = CPOConfig(**common(tmp_path_factory.mktemp("simpo"), rows=PAIRS, beta=2.0,
                              loss_type="simpo", cpo_alpha=0.0, simpo_gamma=1.0))
    return CPOTrainer(model=model, args=args, train_dataset=Dataset.from_list(PAIRS),
                      processing_class=tok)


def wants_grad(*xs):
    return [x.detach().clone().requires_grad_(True) for x in xs]


def random_mean_logps(n: int, seed: int):
    """(n,) length-averaged log-probs in (−6, −1e-3): both sides of log1mexp's −ln 2 branch."""
    g = torch.Generator().manual_seed(seed)
    return -torch.exp(torch.empty(n).uniform_(-7, 1.8, generator=g)).clamp(1e-3, 6)


# ---------------------------------------------------------------- (a) random log-probs

@pytest.mark.parametrize("beta", [0.1, 0.5])
def test_orpo_matches_trl_on_random_logps(orpo, beta):
    orpo.beta = beta                                # the attribute odds_ratio_loss reads
    c0, r0 = random_mean_logps(64, 1), random_mean_logps(64, 2)
    nll0 = torch.tensor(2.3)
    c, r, nll = wants_grad(c0, r0, nll0)
    losses, reward_c, reward_r, log_odds_ratio, log_odds_chosen = orpo.odds_ratio_loss(c, r)
    theirs = nll - losses.mean()                    # get_batch_loss_metrics' "full ORPO loss"
    g_theirs = torch.autograd.grad(theirs, (c, r, nll))
    c2, r2, nll2 = wants_grad(c0, r0, nll0)
    ours, m = orpo_losses(c2, r2, nll2, beta)
    g_ours = torch.autograd.grad(ours, (c2, r2, nll2))
    note("orpo(a) value rel", rel(ours, theirs))
    note("orpo(a) grad abs", grad_diff(g_ours, g_theirs))
    assert rel(ours, theirs) <= VALUE_RTOL and grad_diff(g_ours, g_theirs) <= GRAD_ATOL
    for name, want in [("rewards/chosen", reward_c), ("rewards/rejected", reward_r),
                       ("log_odds_ratio", log_odds_ratio), ("log_odds_chosen", log_odds_chosen),
                       ("rewards/accuracies", (reward_c > reward_r).float().mean())]:
        assert rel(m[name].mean(), want.mean()) <= VALUE_RTOL, name
    # not blind: β off by 1 % is seen
    off, _ = orpo_losses(c2, r2, nll2, beta * 1.01)
    assert rel(off, theirs) > VALUE_RTOL


@pytest.mark.parametrize("beta,gamma", [(2.0, 1.0), (10.0, 0.5)])
def test_simpo_matches_trl_on_random_logps(simpo, beta, gamma):
    simpo.beta, simpo.simpo_gamma = beta, gamma     # what cpo_loss reads
    c0, r0 = random_mean_logps(64, 3), random_mean_logps(64, 4)
    c, r = wants_grad(c0, r0)
    losses, reward_c, reward_r = simpo.cpo_loss(c, r)
    theirs = losses.mean()                          # + cpo_alpha (0) · nll
    g_theirs = torch.autograd.grad(theirs, (c, r))
    c2, r2 = wants_grad(c0, r0)
    ours, m = simpo_losses(c2, r2, beta, gamma_beta_ratio=gamma / beta)
    g_ours = torch.autograd.grad(ours, (c2, r2))
    note("simpo(a) value rel", rel(ours, theirs))
    note("simpo(a) grad abs", grad_diff(g_ours, g_theirs))
    assert rel(ours, theirs) <= VALUE_RTOL and grad_diff(g_ours, g_theirs) <= GRAD_ATOL
    assert rel(m["rewards/chosen"], reward_c) <= VALUE_RTOL
    assert rel(m["rewards/margins"], reward_c - reward_r) <= VALUE_RTOL
    off, _ = simpo_losses(c2, r2, beta * 1.01, gamma_beta_ratio=gamma / beta)
    assert rel(off, theirs) > VALUE_RTOL


# ---------------------------------------------------------------- (b) a real tiny model

def pair_forward(model, batch, pad_id: int):
    """TRL's concatenated forward (ORPOTrainer/CPOTrainer.concatenated_forward), written again:
    chosen rows then rejected rows padded to one length, one model call. Returns the (2n,)
    completion log-probs averaged over each row's labelled tokens, and the chosen rows' NLL over
    every attended token (prompt included, token-weighted: ORPO's), and that NLL over the
    completion tokens only (not TRL's: the ORPO test shows the difference is seen)."""
    n = batch["chosen_input_ids"].shape[0]
    width = max(batch["chosen_input_ids"].shape[1], batch["rejected_input_ids"].shape[1])

    def both(key, value):
        rows = [batch[f"{side}_{key}"] for side in ("chosen", "rejected")]
        return torch.cat([F.pad(x, (0, width - x.shape[1]), value=value) for x in rows])
    ids, mask, labels = both("input_ids", pad_id), both("attention_mask", 0), both("labels", -100)
    logp = F.log_softmax(model(input_ids=ids, attention_mask=mask, use_cache=False)
                         .logits[:, :-1].float(), -1)                                # (2n, S-1, V)
    target = labels[:, 1:]                                                           # (2n, S-1)
    keep = target != -100
    tok_lp = logp.gather(-1, target.clamp(min=0)[..., None])[..., 0]                 # (2n, S-1)
    mean_lp = (tok_lp * keep).sum(-1) / keep.sum(-1)                                 # (2n,)
    real = mask[:n, 1:] == 1                                                         # (n, S-1)
    nll_lp = logp[:n].gather(-1, ids[:n, 1:, None])[..., 0]
    nll = -(nll_lp * real).sum() / real.sum()
    return mean_lp[:n], mean_lp[n:], nll, -(tok_lp[:n] * keep[:n]).sum() / keep[:n].sum()


def same_as_logged(metrics: dict, logged: dict, names):
    """Our metrics' means are the numbers TRL's trainer stored for its log, name for name."""
    for name in names:
        want = logged[name]
        assert abs(float(metrics[name].mean()) - want) <= VALUE_RTOL * max(1, abs(want)), name


def grads_of(model, loss) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss.backward()
    return [p.grad.detach().clone() for p in model.parameters()]


def one_batch(trainer):
    batch = next(iter(trainer.get_train_dataloader()))
    return {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}


def test_orpo_matches_trl_trainer_on_a_tiny_model(orpo, tok):
    orpo.beta = 0.1
    model, batch = orpo.model, one_batch(orpo)
    theirs = orpo.compute_loss(model, batch)
    g_theirs = grads_of(model, theirs)
    c, r, nll, completion_nll = pair_forward(model, batch, tok.pad_token_id)
    ours, m = orpo_losses(c, r, nll, 0.1)
    g_ours = grads_of(model, ours)
    logged = {k: v[-1] for k, v in orpo._stored_metrics["train"].items()}
    note("orpo(b) value rel", rel(ours.detach(), theirs.detach()))
    note("orpo(b) grad abs", grad_diff(g_ours, g_theirs))
    assert rel(ours.detach(), theirs.detach()) <= VALUE_RTOL
    assert grad_diff(g_ours, g_theirs) <= GRAD_ATOL
    same_as_logged(m, logged, ("rewards/chosen", "rewards/margins", "log_odds_ratio",
                               "log_odds_chosen", "nll_loss"))
    off, _ = orpo_losses(c.detach(), r.detach(), nll.detach(), 0.1 * 1.01)
    assert rel(off, theirs.detach()) > VALUE_RTOL
    # and TRL's NLL covers the prompt: the completion-only NLL does not pass
    off, _ = orpo_losses(c.detach(), r.detach(), completion_nll.detach(), 0.1)
    assert rel(off, theirs.detach()) > VALUE_RTOL


def test_simpo_matches_trl_trainer_on_a_tiny_model(simpo, tok):
    beta, gamma = 2.0, 1.0
    simpo.beta, simpo.simpo_gamma = beta, gamma
    model, batch = simpo.model, one_batch(simpo)
    theirs = simpo.compute_loss(model, batch)
    g_theirs = grads_of(model, theirs)
    c, r, _, _ = pair_forward(model, batch, tok.pad_token_id)
    ours, m = simpo_losses(c, r, beta, gamma / beta)
    g_ours = grads_of(model, ours)
    logged = {k: v[-1] for k, v in simpo._stored_metrics["train"].items()}
    note("simpo(b) value rel", rel(ours.detach(), theirs.detach()))
    note("simpo(b) grad abs", grad_diff(g_ours, g_theirs))
    assert rel(ours.detach(), theirs.detach()) <= VALUE_RTOL
    assert grad_diff(g_ours, g_theirs) <= GRAD_ATOL
    same_as_logged(m, logged, ("rewards/chosen", "rewards/rejected", "logps/chosen"))
    off, _ = simpo_losses(c.detach(), r.detach(), beta * 1.01, gamma / beta)
    assert rel(off, theirs.detach()) > VALUE_RTOL


def completion_logps(model, ids, attention, completion):
    """(B,) summed log-probs of the completion tokens (TRL KTO's: labels = input ids where
    completion_mask is 1, shifted)."""
    logp = F.log_softmax(model(input_ids=ids, attention_mask=attention, use_cache=False)
                         .logits[:, :-1].float(), -1)                                # (B, S-1, V)
    tok_lp = logp.gather(-1, ids[:, 1:, None])[..., 0]                               # (B, S-1)
    return (tok_lp * (completion[:, 1:] == 1)).sum(-1)


def test_kto_matches_trl_trainer_on_a_tiny_model(tok, tmp_path):
    """KTO has no loss method of its own in TRL 1.16 (the loss sits inside _compute_loss), so
    this is its value-and-gradient check. Two random models, each once the policy and once the
    reference: the KL estimate z₀ has opposite signs in the two runs, so both the clamped (z₀ <
    0 → 0) and the unclamped baseline are compared."""
    beta, w_d, w_u = 0.5, 1.0, 1.25
    a, b = tiny_model(len(tok), 1), tiny_model(len(tok), 2)
    raw_kls = []
    for policy, ref in ((a, b), (b, a)):
        policy, ref = copy.deepcopy(policy), copy.deepcopy(ref)
        args = KTOConfig(**common(tmp_path / f"kto{len(raw_kls)}", rows=RECORDS, beta=beta,
                                  desirable_weight=w_d, undesirable_weight=w_u,
                                  train_sampling_strategy="sequential"))
        trainer = KTOTrainer(model=policy, ref_model=ref, args=args,
                             train_dataset=Dataset.from_list(RECORDS), processing_class=tok)
        batch = one_batch(trainer)
        theirs = trainer.compute_loss(policy, batch)
        g_theirs = grads_of(policy, theirs)
        logps = completion_logps(policy, batch["input_ids"], batch["attention_mask"],
                                 batch["completion_mask"])
        with torch.no_grad():
            ref_logps = completion_logps(ref, batch["input_ids"], batch["attention_mask"],
                                         batch["completion_mask"])
            kl_args = [batch[f"KL_{k}"] for k in ("input_ids", "attention_mask", "completion_mask")]
            raw = kto_kl(completion_logps(policy, *kl_args), completion_logps(ref, *kl_args))
        raw_kls.append(float(raw))
        ours, m = kto_losses(logps, ref_logps, batch["label"], raw, beta, w_d, w_u)
        g_ours = grads_of(policy, ours)
        logged = {k: v[-1] for k, v in trainer._metrics["train"].items()}
        note("kto(b) value rel", rel(ours.detach(), theirs.detach()))
        note("kto(b) grad abs", grad_diff(g_ours, g_theirs))
        assert rel(ours.detach(), theirs.detach()) <= VALUE_RTOL
        assert grad_diff(g_ours, g_theirs) <= GRAD_ATOL
        same_as_logged(m, logged, ("kl", "rewards/chosen", "rewards/rejected", "rewards/margins"))
        off, _ = kto_losses(logps.detach(), ref_logps, batch["label"], raw, beta * 1.01, w_d, w_u)
        assert rel(off, theirs.detach()) > VALUE_RTOL
    assert min(raw_kls) < 0 < max(raw_kls), raw_kls   # both branches of the clamp were compared


@pytest.mark.parametrize("labels,kl_shift", [((1, 0, 1, 1), 3.0), ((1, 0, 1, 1), -3.0),
                                             ((1, 1, 1, 1), 2.0), ((0, 0, 0, 0), 2.0)])
def test_kto_matches_trl_on_random_reference_logps(tok, tmp_path, labels, kl_shift):
    """KTO's (a): TRL's own loss code (_compute_loss in its precomputed-reference mode, the
    attribute it reads set on a real trainer) fed seeded random reference log-probs for the
    records and the KL pairs, so the log-ratios and z₀ range wider than two models give:
    3:1 label mixes with z₀ > 0 and z₀ < 0 (clamped), all desirable, all undesirable (TRL
    then logs no margin and averages one kind only)."""
    beta, w_d, w_u = 0.2, 1.3, 0.8
    policy = tiny_model(len(tok), 5)
    args = KTOConfig(**common(tmp_path, rows=RECORDS, beta=beta, desirable_weight=w_d,
                              undesirable_weight=w_u, train_sampling_strategy="sequential"))
    trainer = KTOTrainer(model=policy, ref_model=tiny_model(len(tok), 6), args=args,
                         train_dataset=Dataset.from_list(RECORDS), processing_class=tok)
    trainer.precompute_ref_logps = True             # read ref_logps / ref_KL_logps from the batch
    batch = one_batch(trainer)
    batch["label"] = torch.tensor(labels, dtype=torch.bool)
    kl_args = [batch[f"KL_{k}"] for k in ("input_ids", "attention_mask", "completion_mask")]
    with torch.no_grad():
        policy_kl = completion_logps(policy, *kl_args)
    g = torch.Generator().manual_seed(7)
    n = len(labels)
    # z₀ = mean(policy_kl − ref_kl) lands near kl_shift: its sign picks the clamp's branch
    batch["ref_KL_logps"] = policy_kl - kl_shift + torch.randn(n, generator=g)
    logps = completion_logps(policy, batch["input_ids"], batch["attention_mask"],
                             batch["completion_mask"])
    batch["ref_logps"] = logps.detach() + 4 * torch.randn(n, generator=g)
    theirs = trainer.compute_loss(policy, batch)
    g_theirs = grads_of(policy, theirs)
    raw = kto_kl(policy_kl, batch["ref_KL_logps"])
    assert (float(raw) > 0) == (kl_shift > 0)
    logps = completion_logps(policy, batch["input_ids"], batch["attention_mask"],
                             batch["completion_mask"])
    ours, m = kto_losses(logps, batch["ref_logps"], batch["label"], raw, beta, w_d, w_u)
    g_ours = grads_of(policy, ours)
    logged = {k: v[-1] for k, v in trainer._metrics["train"].items()}
    note("kto(a) value rel", rel(ours, theirs))
    note("kto(a) grad abs", grad_diff(g_ours, g_theirs))
    assert rel(ours, theirs) <= VALUE_RTOL and grad_diff(g_ours, g_theirs) <= GRAD_ATOL
    kinds = [k for k, present in (("rewards/chosen", any(labels)),
                                  ("rewards/rejected", not all(labels))) if present]
    same_as_logged(m, logged, ["kl"] + kinds + (["rewards/margins"] if len(kinds) == 2 else []))
    assert ("rewards/margins" in m) == ("rewards/margins" in logged)
    off, _ = kto_losses(logps.detach(), batch["ref_logps"], batch["label"], raw, beta * 1.01,
                        w_d, w_u)
    assert rel(off, theirs) > VALUE_RTOL


@pytest.mark.parametrize("loss_type", DPO_LOSSES)
def test_mens_dpo_matches_trl_dpo_trainer_on_a_tiny_model(tok, tmp_path, loss_type):
    """mens's existing DPO loss (mens.objective.dpo.dpo_losses; its log-ratios as the dpo
    objective's step builds them: summed completion log-probs, ipo averaged over the completion tokens)
    against TRL 1.16's DPOTrainer._compute_loss (no dpo_loss method in 1.16), a separate
    random reference model."""
    beta = 0.5
    policy, ref = tiny_model(len(tok), 3), tiny_model(len(tok), 4)
    args = DPOConfig(**common(tmp_path, rows=PAIRS, beta=beta, loss_type=[loss_type]))
    trainer = DPOTrainer(model=policy, ref_model=ref, args=args,
                         train_dataset=Dataset.from_list(PAIRS), processing_class=tok)
    batch = one_batch(trainer)                      # rows: the chosen answers, then the rejected
    theirs = trainer.compute_loss(policy, batch)
    g_theirs = grads_of(policy, theirs)
    ids, attention, completion = (batch[k] for k in ("input_ids", "attention_mask",
                                                     "completion_mask"))
    logps = completion_logps(policy, ids, attention, completion)                     # (2n,)
    with torch.no_grad():
        ref_logps = completion_logps(ref, ids, attention, completion)
    if loss_type == "ipo":       # MensModule.dpo_loss: supervised (shifted) tokens per row
        tokens = completion[:, 1:].sum(-1).clamp(min=1).to(logps.dtype)
        logps, ref_logps = logps / tokens, ref_logps / tokens
    n = len(PAIRS)
    ratios = logps - ref_logps
    ours = dpo_losses(ratios[:n], ratios[n:], beta, loss_type).mean()
    g_ours = grads_of(policy, ours)
    note(f"dpo-{loss_type}(b) value rel", rel(ours, theirs))
    note(f"dpo-{loss_type}(b) grad abs", grad_diff(g_ours, g_theirs))
    assert rel(ours, theirs) <= VALUE_RTOL and grad_diff(g_ours, g_theirs) <= GRAD_ATOL
    off = dpo_losses(ratios[:n].detach(), ratios[n:].detach(), beta * 1.01, loss_type).mean()
    assert rel(off, theirs) > VALUE_RTOL
