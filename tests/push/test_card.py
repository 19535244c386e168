"""The model card of `mens push` (mens.push.card) on a real tiny run, evaluated and gated for real
(`mens gate` with a few prompts writes both eval.json and gate.json): huggingface_hub parses it,
its metadata and model-index carry eval.json's numbers, its body the evidence; a run without
eval.json or gate.json says so instead of inventing numbers."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from train_util import run_copy

# the gate's own evaluation, as small as it goes: the loss of 2 held-out prompts, one 8-token
# answer each, no collateral spokes (~10 s on one CPU thread)
TINY_GATE = ["logger=csv", "gate.metric=loss", "gate.max_prompts=2", "gate.k=1",
             "gate.max_new_tokens=8", "gate.collateral=false"]


@pytest.fixture(scope="module")
def gated(tiny_run, tmp_path_factory):
    """A copy of the session's tiny run with a real eval.json and gate.json."""
    run = run_copy(tiny_run, tmp_path_factory.mktemp("card") / "run")
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env["OMP_NUM_THREADS"] = "1"     # tiny models on a shared box: one thread is fastest
    p = subprocess.run([sys.executable, "-m", "mens.gate", f"run={run}", *TINY_GATE],
                       cwd=run.parent, capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode in (0, 3), p.stderr[-3000:]          # pass or refuse: both write a receipt
    assert (run / "eval.json").is_file() and (run / "gate.json").is_file()
    return run


@pytest.fixture(scope="module")
def card(gated, tmp_path_factory):
    from huggingface_hub import ModelCard

    from mens.push.card import model_card

    text = model_card(gated, "me/tiny-vox", gguf_repo="me/tiny-vox-GGUF")
    path = tmp_path_factory.mktemp("readme") / "README.md"
    path.write_text(text)
    return text, ModelCard.load(path)


def test_the_hub_reads_the_metadata(card, gated):
    text, mc = card
    spec_rung = "mens/tiny"
    assert mc.data.base_model == spec_rung
    assert mc.data.library_name == "peft" and mc.data.pipeline_tag == "text-generation"
    assert {"mens", "lora", "sft", "vox_lang", "peft"} <= set(mc.data.tags)
    # the tiny asset states no licence: `other`, named, with the note in the body
    assert mc.data.license == "other" and mc.data.license_name
    assert mc.data.license_link == "LICENSE.md"      # the Hub requires a link with `other`
    from hub_server import validate_metadata          # the stand-in Hub's subset of its check
    assert validate_metadata(text, "model")[0] == []
    assert "states no licence" in text and "mens/assets/tiny" in text
    assert "A LoRA adapter for [mens/tiny]" in text
    # the asset's bytes pin the base (SHA256SUMS), said in the text
    sums = (__import__("mens.resources", fromlist=["ASSETS"]).ASSETS / "tiny" /
            "SHA256SUMS").read_text().split()
    assert sums[sums.index("model.safetensors") - 1] in text


def test_the_model_index_is_eval_json(card, gated):
    from huggingface_hub.repocard_data import model_index_to_eval_results

    text, mc = card
    ev = json.loads((gated / "eval.json").read_text())
    want = {(r["task"], r["metric"]): r for r in ev["rows"] if r["group"] == "in_domain"}
    assert ("vox_lang", "loss") in want and len(want) >= 3
    got = {(e.dataset_type, e.metric_type): e for e in mc.data.eval_results}
    assert set(got) == set(want)
    for key, row in want.items():
        e = got[key]
        assert e.metric_value == row["tuned"]["value"]            # the tuned model's number
        lo, hi = row["tuned"]["ci"]
        assert f"[{lo:.4g}, {hi:.4g}]" in e.metric_name          # its interval, in the name
        assert e.dataset_config == "in_domain" and e.metric_config == f"n={row['n']}"
    # the raw model-index as it sits in the YAML parses with the Hub's own reader
    import yaml
    meta = yaml.safe_load(text.split("---\n")[1])
    name, results = model_index_to_eval_results(meta["model-index"])
    assert name == "tiny-vox" and len(results) == len(want)


def test_the_body_carries_the_evidence(card, gated):
    text, _ = card
    ev = json.loads((gated / "eval.json").read_text())
    gate = json.loads((gated / "gate.json").read_text())
    summ = json.loads((gated / "summary.json").read_text())
    plan = json.loads((gated / "plan.json").read_text())
    loss = next(r for r in ev["rows"] if r["name"] == "vox_lang/loss")
    b, t = loss["base"], loss["tuned"]
    assert (f"| in_domain | vox_lang/loss | {loss['n']} | {b['value']:.4f} [{b['ci'][0]:.4f}, "
            f"{b['ci'][1]:.4f}] | {t['value']:.4f} [{t['ci'][0]:.4f}, {t['ci'][1]:.4f}] |") in text
    assert f"**{gate['verdict'].upper()}**" in text
    for reason in gate["reasons"]:
        assert reason in text
    assert f"steps {summ['steps']}" in text and f"{summ['train_tokens']} tokens" in text
    assert f"seq_len 256 × micro_batch 4 × grad_accum" in text      # FAST_TRAIN's shape
    assert f"plan cell `{plan['cell']}`" in text
    assert f"{summ['measured_peak_bytes'] / 2**30:.2f} GiB" in text
    spec = __import__("yaml").safe_load((gated / "spec.yaml").read_text())
    for item in spec["data_lock"]:
        assert item["sha256"] in text                               # the data lock
    for snippet in ("PeftModel.from_pretrained(base, \"me/tiny-vox\")", "--enable-lora",
                    "--lora-modules tiny-vox=", "--lora ", "ollama create tiny-vox -f Modelfile"):
        assert snippet in text
    assert "wandb: none: the run logged to `csv`" in text
    assert str(gated) not in text                     # no local path of the pushing machine


def test_without_eval_or_gate_the_card_says_so(tiny_run, tmp_path):
    from huggingface_hub import ModelCard

    from mens.push.card import model_card

    run = run_copy(tiny_run, tmp_path / "bare")
    path = tmp_path / "README.md"
    path.write_text(model_card(run, "me/bare"))
    mc = ModelCard.load(path)
    assert mc.data.eval_results is None and "model-index" not in path.read_text()
    text = path.read_text()
    assert "not evaluated (no eval.json" in text and "Gate: not gated" in text
    assert "no GGUFs were pushed" in text


def test_an_eval_of_other_weights_is_left_out(gated, tmp_path):
    """eval.json names the bytes it judged: after a retrain it no longer speaks for the adapter."""
    from mens.push.card import model_card

    run = shutil.copytree(gated, tmp_path / "retrained")
    with open(run / "adapter" / "adapter_model.safetensors", "ab") as f:
        f.write(b"\0")                                # other bytes than eval.json judged
    text = model_card(run, "me/x")
    assert "model-index" not in text and "judged other weights" in text
    assert "Gate: void" in text
