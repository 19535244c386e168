"""In-domain scoring (mens.eval.indomain) on the real tiny run: batched generation against
mens.serve's own, per-item loss against eval_loss, and score_set's rows and verdicts with the
real Vox oracle (and the real unverified path: a checker that cannot start)."""
from __future__ import annotations

from itertools import combinations

import pytest
from omegaconf import OmegaConf

from mens.eval.stats import pass_at_k


def test_pass_at_k_is_the_unbiased_estimator():
    assert pass_at_k(5, 0, 1) == 0.0 and pass_at_k(5, 5, 3) == 1.0
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)         # 1 − C(3,2)/C(5,2)
    assert pass_at_k(4, 1, 4) == 1.0
    for n, c, k in [(6, 2, 3), (7, 3, 2), (5, 1, 5)]:               # every k-subset, counted
        outcomes = [1] * c + [0] * (n - c)
        subsets = list(combinations(outcomes, k))
        assert pass_at_k(n, c, k) == pytest.approx(sum(map(any, subsets)) / len(subsets))
    with pytest.raises(ValueError, match="pass@3 needs at least 3 samples"):
        pass_at_k(2, 1, 3)


@pytest.fixture(scope="module")
def loaded(tiny_run):
    """(spec, base slots + slot, tuned slots + slot, held-out vox_lang records) of the tiny run."""
    from mens.compare.core import load_models
    from mens.data.select import eval_records

    spec = OmegaConf.load(tiny_run / "spec.yaml")
    (b_slots, b), (a_slots, a) = load_models(tiny_run, spec)
    name, recs = eval_records(spec)["eval"]
    assert name == "vox_lang"
    yield spec, (b_slots, b), (a_slots, a), recs
    b_slots.close()


def _prompts(slots, recs, n):
    """The held-out prompts as score_set builds them: the turns up to the last user turn."""
    out = []
    for r in recs[:n]:
        last = max(i for i, m in enumerate(r["messages"]) if m["role"] == "user")
        out.append(slots.encode_chat(r["messages"][:last + 1]))
    return out


def test_greedy_matches_serve_and_batching_changes_nothing(loaded):
    from mens.eval.indomain import generate
    from mens.serve.generate import GenRequest, generate as serve_generate

    _, (slots, base), (_, tuned), recs = loaded
    prompts = _prompts(slots, recs, 3)
    assert len({len(p) for p in prompts}) > 1          # different lengths: left padding is used
    for slot in (base, tuned):
        batched = generate(slots, slot, prompts, n=1, temperature=0, top_p=1.0, max_new=16,
                           seed=0, batch_size=3)
        alone = generate(slots, slot, prompts, n=1, temperature=0, top_p=1.0, max_new=16,
                         seed=0, batch_size=1)
        assert batched == alone
        served = serve_generate(slots, slot, GenRequest(tuple(prompts[0]), 16, temperature=0))
        assert batched[0] == [served.text] and served.text
    with pytest.raises(ValueError, match="one answer per prompt"):
        generate(slots, base, prompts, n=2, temperature=0, top_p=1.0, max_new=4, seed=0,
                 batch_size=2)


def test_sampling_is_deterministic_for_a_seed(loaded):
    from mens.eval.indomain import generate

    _, (slots, _), (_, tuned), recs = loaded
    prompts = _prompts(slots, recs, 2)
    kw = dict(n=3, temperature=1.0, top_p=1.0, max_new=12, batch_size=6)
    first = generate(slots, tuned, prompts, seed=7, **kw)
    assert first == generate(slots, tuned, prompts, seed=7, **kw)
    assert [len(x) for x in first] == [3, 3]
    assert first != generate(slots, tuned, prompts, seed=8, **kw)
    assert len({t for x in first for t in x}) > 1        # the samples differ from each other


def test_item_losses_sum_to_eval_loss(loaded):
    from mens.data.examples import examples_for
    from mens.eval.indomain import item_losses
    from mens.train.evaluate import eval_loss

    spec, (slots, _), (_, tuned), recs = loaded
    phases = list(spec.curriculum.phases)
    exs, _ = examples_for([dict(r, phase=phases[0]) for r in recs[:5]], slots.tokenizer, spec,
                          phases, pairs=False)
    exs = list(exs.values())
    nll, tok = item_losses(slots, tuned, exs)
    with slots.activate(tuned):
        whole = eval_loss(slots.model, exs, 4, max(len(e) for e in exs))
    slots.model.eval()
    assert len(nll) == len(exs) and all(x > 0 for x in nll)
    assert tok == [sum(x != -100 for x in e.labels[1:]) for e in exs]   # in the order given
    assert sum(nll) / sum(tok) == pytest.approx(whole["loss"], rel=1e-5)


def _ev(**over):
    from mens.config.compose import compose
    return compose([f"eval.{k}={v}" for k, v in over.items()]).eval


def test_score_set_rows_and_every_verdict(loaded):
    from mens.eval.indomain import score_set

    spec, (slots, base), (_, tuned), recs = loaded
    ev = _ev(k=2, max_new_tokens=16, bootstrap=200)
    out = score_set(slots, base, tuned, recs[:3], "vox_parses", spec, ev, role="spoke",
                    spoke="vox_lang", batch_size=4)
    rows = {r["name"]: r for r in out["rows"]}
    assert list(rows) == ["vox_lang/loss", "vox_lang/greedy", "vox_lang/pass@1",
                          "vox_lang/pass@2"]
    for r in rows.values():
        assert r["group"] == "in_domain" and r["n"] == 3 and r["spoke"] == "vox_lang"
        for part in ("base", "tuned"):
            lo, hi = r[part]["ci"]
            assert lo <= r[part]["value"] <= hi
        # exact on 3 items: no bound (sign flips), or McNemar's interval on 0/1 scores, which
        # cannot exclude 0 with fewer than 6 items that differ
        ci = r["gain"]["ci"]
        assert (ci is None or ci[0] <= 0 <= ci[1]) and r["gain"]["p"] >= 0.125
    loss = rows["vox_lang/loss"]
    assert not loss["higher_is_better"] and loss["tokens"] > 0
    assert loss["tuned"]["value"] < loss["base"]["value"]           # the tiny run learned
    assert loss["gain"]["value"] == pytest.approx(
        1 - loss["tuned"]["value"] / loss["base"]["value"])
    assert rows["vox_lang/pass@2"]["unverified"] == {"base": 0, "tuned": 0,
                                                     "prompts_left_out": 0, "reasons": []}
    assert len(out["items"]) == 3
    for it, rec in zip(out["items"], recs):
        assert it["id"] == rec["id"] and it["prompt"]
        for m in ("base", "tuned"):
            g, samples = it[m]["greedy"], it[m]["samples"]
            assert len(samples) == 2 and it[m]["nll"] > 0
            for v in (g, *samples):        # verified: the Vox parser ran on every answer
                assert v["passed"] in (True, False) and isinstance(v["text"], str)
                assert v["passed"] or v["diagnostics"]
    # each row's values are the verdicts kept in the items
    greedy = [float(it["tuned"]["greedy"]["passed"]) for it in out["items"]]
    assert rows["vox_lang/greedy"]["tuned"]["value"] == pytest.approx(sum(greedy) / 3)
    p1 = [sum(s["passed"] for s in it["base"]["samples"]) / 2 for it in out["items"]]
    assert rows["vox_lang/pass@1"]["base"]["value"] == pytest.approx(sum(p1) / 3)


def test_unverified_verdicts_are_counted_never_passed(loaded):
    """The checker cannot start (8 MB of address space, mens.synth.oracle's own path for an
    oracle that cannot run): no verdict, so the greedy row has no value, and says why."""
    from mens.eval.indomain import score_set

    spec, (slots, base), (_, tuned), recs = loaded
    ev = _ev(k=2, max_new_tokens=8, bootstrap=200)
    out = score_set(slots, base, tuned, recs[:3], "vox_parses", spec, ev, role="collateral",
                    spoke="vox_lang", batch_size=4, k=0, greedy=True,
                    oracle={"memory_mb": 8})
    rows = {r["name"]: r for r in out["rows"]}
    assert list(rows) == ["vox_lang/loss", "vox_lang/greedy"]       # greedy only: no samples
    g = rows["vox_lang/greedy"]
    assert g["group"] == "collateral" and g["n"] == 0
    assert g["base"]["value"] is None and g["tuned"]["value"] is None
    assert g["gain"]["value"] is None
    assert g["unverified"]["base"] == 3 and g["unverified"]["tuned"] == 3
    assert g["unverified"]["prompts_left_out"] == 3
    assert g["unverified"]["reasons"][0].startswith("the checker did not start")
    assert rows["vox_lang/loss"]["n"] == 3 and rows["vox_lang/loss"]["base"]["value"] > 0
    for it in out["items"]:
        assert it["base"]["greedy"]["passed"] is None and "samples" not in it["base"]
    # no oracle, or k=0 by the config: the loss row only
    assert [r["name"] for r in score_set(slots, base, tuned, recs[:2], None, spec, ev,
                                         role="spoke", spoke="vox_lang",
                                         batch_size=4)["rows"]] == ["vox_lang/loss"]


def test_the_oracle_credits_only_the_models_own_answer():
    """A multi-turn held-out prompt carries the data's earlier assistant turns: their valid code
    or messages must not pass for the model (seen: 6 of the tiny base's 40 vox_lang "passes"
    were an earlier turn's code; the base's populi_mesh greedy rate was 52 % on the data's
    messages)."""
    from mens.synth.oracle_checks import oracle_record
    from mens.synth.oracle import judge_batch

    vox = {"id": "r", "messages": [
        {"role": "system", "content": "Write Vox."}, {"role": "user", "content": "print 1"},
        {"role": "assistant", "content": "```vox\nprint(1);\n```"},
        {"role": "user", "content": "now print 2"}]}
    head = vox["messages"]
    bad, good = oracle_record(vox, head, "no code here", "vox_parses"), \
        oracle_record(vox, head, "```vox\nprint(2);\n```", "vox_parses")
    assert [m["role"] for m in bad["messages"]] == ["system", "user", "assistant"]
    assert [v.passed for v in judge_batch("vox_parses", [bad, good])] == [False, True]
    msg = '```json\n{"id": "m1", "sender": "a", "recipients": ["b"], "reply_to": null}\n```'
    mesh = {"id": "m", "messages": [{"role": "user", "content": "start"},
                                    {"role": "assistant", "content": msg},
                                    {"role": "user", "content": "reply to it"}]}
    silent = oracle_record(mesh, mesh["messages"], "ok", "mesh_messages")
    reply = oracle_record(mesh, mesh["messages"], msg.replace('"m1"', '"m2"', 1).replace(
        '"reply_to": null', '"reply_to": "m1"'), "mesh_messages")
    v = judge_batch("mesh_messages", [silent, reply])
    assert v[0].passed is False and "no ```json message" in v[0].diagnostics
    assert v[1].passed is True, v[1].diagnostics


def test_pair_and_labeled_records_are_scored_by_their_good_answer(loaded):
    """A DPO or KTO run's held-out pairs / labeled records (issue #37: they were dropped, so a
    preference run gated on 0 items): scored as the chat of their prompt and chosen — or
    desirable — answer, item for item the loss of that chat; an undesirable answer and a text
    record are left out and counted."""
    from mens.eval.indomain import as_chats, score_set

    spec, (slots, base), (_, tuned), recs = loaded
    chats = [r for r in recs if r["messages"][-1]["role"] == "assistant"][:4]
    assert len(chats) == 4
    bad = [{"role": "assistant", "content": "no."}]
    pairs = [{"id": f"{r['id']}:p", "prompt": r["messages"][:-1], "chosen": r["messages"][-1:],
              "rejected": bad} for r in chats[:2]]
    good = [{"id": f"{r['id']}:l", "prompt": r["messages"][:-1],
             "completion": r["messages"][-1:], "label": True} for r in chats[2:]]
    undesirable = {"id": "u", "prompt": chats[0]["messages"][:-1], "completion": bad,
                   "label": False}
    scored, left = as_chats([*pairs, undesirable, *good, {"id": "t", "text": "plain text"}])
    assert left == {"undesirable": 1, "text": 1}
    assert [r["id"] for r in scored] == [f"{chats[0]['id']}:p", f"{chats[1]['id']}:p",
                                         f"{chats[2]['id']}:l", f"{chats[3]['id']}:l"]
    assert [r["messages"] for r in scored] == [r["messages"] for r in chats]
    ev = _ev(k=0, bootstrap=200)
    as_pairs = score_set(slots, base, tuned, scored, None, spec, ev, role="spoke",
                         spoke="vox_lang", batch_size=4)
    as_chat = score_set(slots, base, tuned, chats, None, spec, ev, role="spoke",
                        spoke="vox_lang", batch_size=4)
    assert as_pairs["rows"][0]["n"] == 4
    for a, b in zip(as_pairs["items"], as_chat["items"]):
        assert a["tuned"]["nll"] == pytest.approx(b["tuned"]["nll"]) and a["tokens"] == b["tokens"]


def test_a_dpo_run_on_user_pairs_gates_on_its_held_out_pairs(compile_run, tmp_path):
    """held_out_sets of a DPO spec on the user's pairs: every held-out pair, as its chosen chat."""
    import json

    from omegaconf import OmegaConf

    from mens.data.select import eval_records
    from mens.eval.run import held_out_sets

    path = tmp_path / "pairs.jsonl"
    with open(path, "w") as f:
        for i in range(80):
            f.write(json.dumps({"prompt": f"What is {i} times 3?", "chosen": str(3 * i),
                                "rejected": f"{i} times 3 is {3 * i + 1}"}) + "\n")
    spec, _ = compile_run("+hw=cpu", "lane=dpo", "data=file", f"data.path={path}",
                          "data.collateral=none")
    spec = OmegaConf.create(spec.config_dict())
    _, held = eval_records(spec)["eval"]
    assert held and all("chosen" in r for r in held)
    [(role, name, check, recs)] = held_out_sets(spec, 64, False)
    assert (role, name, check) == ("in_domain", "file:pairs", None)
    assert len(recs) == len(held)
    for r, h in zip(recs, held):
        assert r["messages"][-1] == h["chosen"][-1] and r["messages"][:-1] == h["prompt"]
