"""Acceptance of issue #12 for `+rung=hf`: a tiny random Llama-3-architecture model saved to a
directory trains (`+rung=hf rung.path=…`) on a user's chat file, exports to GGUF, and a real
llama.cpp gives the same tokens and greedy text as transformers; the plan of the real
meta-llama/Llama-3.1-8B from a cached config.json counts its 8,030,261,248 parameters."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from train_util import FAST_TRAIN
from families_util import make_model, make_tokenizer
from userdata import chat_records, write_jsonl

CONFIGS = Path(__file__).resolve().parent.parent / "plan" / "fixtures" / "configs"


def test_plan_of_llama_31_8b_from_a_cached_config_is_exact(tmp_path, monkeypatch, compile_run):
    from mens.plan.memory import Arch

    snap = tmp_path / "hub" / "models--meta-llama--Llama-3.1-8B" / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    shutil.copy(CONFIGS / "Llama-3.1-8B.json", snap / "config.json")
    (snap.parent.parent / "refs").mkdir()
    (snap.parent.parent / "refs" / "main").write_text("a" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")   # nothing may be fetched: the cache answers
    spec, plan = compile_run("+hw=h100", "+rung=hf", "rung.repo_id=meta-llama/Llama-3.1-8B")
    assert spec.rung.family == "llama" and spec.rung.name == "Llama-3.1-8B"
    assert Arch.of(spec.rung).params()["total"] == 8_030_261_248
    assert plan.fits and any("tokenizer" in n for n in spec.notes)


# family: a string its Modelfile's chat template holds (the tiny OLMo 2's tokenizer is ChatML)
TRAINED = {"llama": "<|start_header_id|>", "olmo2": "<|im_start|>"}


# OLMo 2's run is marked slow (~1 min, `make test-full`) to keep `make test` within its 20 minutes;
# the fast suite still builds, steps and exports it (tests/source, tests/export/test_families_gguf)
@pytest.mark.parametrize("family", ["llama", pytest.param("olmo2", marks=pytest.mark.slow)])
def test_a_tiny_model_from_a_directory_trains_exports_and_matches_llama_cpp(family, tmp_path,
                                                                           monkeypatch, capsys):
    """Llama 3, and OLMo 2 — the family added as one Family row — end to end."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed: `make install`")
    from mens.cli.export import main as export
    from mens.config.compose import compose
    from mens.plan.output import plan_run
    from mens.train.run import train_run

    hf = tmp_path / family
    tok = make_tokenizer(family, hf)
    make_model(family, hf, len(tok))
    data = write_jsonl(tmp_path / "chat.jsonl", chat_records(120))
    run = tmp_path / "run"
    cfg = compose([*FAST_TRAIN, "+rung=hf", f"rung.path={hf}", "data=file", f"data.path={data}",
                   "data.collateral=none", "train.max_steps=8", "train.seq_len=128",
                   "lane.optimizer.lr=1e-2",
                   "train.eval_max_records=8", "data.eval_fraction=0.1"])
    spec, plan = plan_run(cfg, run, "train")
    assert spec.rung.family == family and spec.rung.path == str(hf)
    summary = train_run(spec, plan, run)
    assert summary["steps"] == 8 and summary["data"] == "file:chat"
    adapter = json.loads((run / "adapter" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == str(hf)   # a local base stays a path
    monkeypatch.chdir(tmp_path)
    code = export([f"run={run}", "export.gguf=[f32]", "export.base_gguf=f32",
                   "export.verify=true"])
    out = capsys.readouterr().out
    assert code == 0, out
    manifest = json.loads((run / "export" / "export.json").read_text())
    assert manifest["verify"]["ok"] and "verify: OK" in out
    modelfile = (run / "export" / "Modelfile").read_text()
    assert TRAINED[family] in modelfile   # Llama 3's chat format, not ChatML
    # serve follows the family: the base + its adapter answer an OpenAI client
    from openai import OpenAI
    from serve_util import running_server

    with running_server(tmp_path, f"run={run}") as (url, _):
        client = OpenAI(base_url=f"{url}/v1", api_key="unused")
        models = [m.id for m in client.models.list().data]
        reply = client.chat.completions.create(
            model=models[-1], max_tokens=5, temperature=0,
            messages=[{"role": "user", "content": "What is 2 plus 3?"}])
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert reply.usage.prompt_tokens > 5 and reply.usage.completion_tokens >= 1
