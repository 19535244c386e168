"""`mens push … push.dry_run=true` on a real tiny run: <run>/push/ holds exactly the files push.json
lists (sizes, sha256), the adapter in PEFT layout naming its base by hub id, the GGUFs under the
GGUF naming convention with a Modelfile that names them, and cards the Hub parses; bad input
exits 2 with one paragraph before anything is written. No upload happens in these tests (the
upload client is mens.push.hub, tested against the stand-in Hub in test_hub_protocol.py)."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest
from train_util import FAST_TRAIN, run_copy

from mens.resources import ASSETS


def push(*args, cwd, env_extra=None, drop=("HYDRA_FULL_ERROR", "HF_TOKEN")):
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "mens.push", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=600)


@pytest.fixture(scope="module")
def dry(tiny_run, tmp_path_factory):
    """One dry run as a user types it, with merged model and GGUFs, on a run never exported."""
    tmp = tmp_path_factory.mktemp("push")
    run = run_copy(tiny_run, tmp / "run")
    p = push(f"run={run}", "push.repo=me/tiny-vox", "push.gguf=true", "push.merged=true",
             "push.dry_run=true", cwd=tmp)
    assert p.returncode == 0, p.stdout + p.stderr
    return {"run": run, "out": run / "push", "proc": p, "tmp": tmp,
            "manifest": json.loads((run / "push" / "push.json").read_text())}


def test_push_dir_is_exactly_the_manifest(dry):
    out, m = dry["out"], dry["manifest"]
    assert "uploaded nothing" in dry["proc"].stdout
    # the missing export was made in-process, and said so
    assert "lacks merged/ and GGUFs: running `mens export" in dry["proc"].stdout
    assert any("running `mens export" in n for n in m["notes"])
    repos = {r["repo_id"]: r for r in m["repos"]}
    assert set(repos) == {"me/tiny-vox", "me/tiny-vox-GGUF"}
    assert {r["folder"] for r in m["repos"]} == {"model", "gguf"}
    on_disk = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    listed = {f"{r['folder']}/{f['path']}" for r in m["repos"] for f in r["files"]}
    assert on_disk == listed | {"push.json"}
    for r in m["repos"]:
        for f in r["files"]:
            data = (out / r["folder"] / f["path"]).read_bytes()
            assert len(data) == f["bytes"] and hashlib.sha256(data).hexdigest() == f["sha256"]
    assert not [p for p in dry["run"].iterdir() if ".tmp" in p.name]   # no temp leftovers
    assert not (dry["tmp"] / "outputs").exists()                         # no Hydra run dir
    model = {f["path"] for f in repos["me/tiny-vox"]["files"]}
    assert {"README.md", "adapter_config.json", "adapter_model.safetensors",
            "merged/config.json", "merged/model.safetensors", "merged/tokenizer.json"} <= model


def test_the_adapter_names_its_hub_base_and_loads_with_peft(dry):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    run, model = dry["run"], dry["out"] / "model"
    cfg = json.loads((model / "adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"] == "mens/tiny" and cfg["revision"] is None
    own = json.loads((run / "adapter" / "adapter_config.json").read_text())
    assert own["base_model_name_or_path"] != "mens/tiny"       # the run's own file is untouched
    assert {k: v for k, v in cfg.items() if k not in ("base_model_name_or_path", "revision")} \
        == {k: v for k, v in own.items() if k not in ("base_model_name_or_path", "revision")}
    big = model / "adapter_model.safetensors"            # > 1 MiB: hard-linked, not copied
    assert big.stat().st_ino == (run / "adapter" / "adapter_model.safetensors").stat().st_ino
    base = AutoModelForCausalLM.from_pretrained(str(ASSETS / "tiny"), dtype=torch.float32)
    peft = PeftModel.from_pretrained(base, str(model))
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        tuned = peft(ids).logits
        with peft.disable_adapter():
            plain = peft(ids).logits
    assert not torch.allclose(tuned, plain)               # the pushed weights act


def test_ggufs_follow_the_naming_convention_with_their_modelfile(dry):
    from huggingface_hub import ModelCard

    from mens.export.modelfile import parse_modelfile

    g = dry["out"] / "gguf"
    names = sorted(p.name for p in g.glob("*.gguf"))
    assert names == ["tiny-F16.gguf", "tiny-vox-F16.gguf", "tiny-vox-F32-LoRA.gguf",
                     "tiny-vox-Q8_0.gguf"]
    exp = json.loads((dry["run"] / "export" / "export.json").read_text())
    by_kind = {(f["kind"], f["quant"]): f["sha256"] for f in exp["files"]}
    sha = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
    assert sha(g / "tiny-vox-Q8_0.gguf") == by_kind[("gguf", "q8_0")]
    assert sha(g / "tiny-vox-F32-LoRA.gguf") == by_kind[("adapter_gguf", "f32")]
    assert sha(g / "tiny-F16.gguf") == by_kind[("base_gguf", "f16")]
    mf = parse_modelfile((g / "Modelfile").read_text())
    assert mf["FROM"] == ["./tiny-F16.gguf"] and mf["ADAPTER"] == ["./tiny-vox-F32-LoRA.gguf"]
    assert parse_modelfile((g / "Modelfile.merged").read_text())["FROM"] == ["./tiny-vox-F16.gguf"]
    assert str(dry["run"]) not in (g / "Modelfile").read_text()     # no local path uploaded
    card = ModelCard.load(g / "README.md")
    assert card.data.base_model == "me/tiny-vox" and card.data.base_model_relation == "quantized"
    assert "gguf" in card.data.tags and "llama-cli -m tiny-F16.gguf --lora tiny-vox-F32-LoRA.gguf" \
        in card.text
    model_card = ModelCard.load(dry["out"] / "model" / "README.md")
    assert model_card.data.base_model == "mens/tiny" and "me/tiny-vox-GGUF" in model_card.text
    assert "--lora tiny-vox-F32-LoRA.gguf" in model_card.text


def test_a_second_assembly_is_byte_identical(dry):
    """Nothing in the uploaded folders depends on the moment: a re-push sends no file."""
    from omegaconf import OmegaConf

    from mens.config.schema import PushConfig
    from mens.push.model import assemble

    p = OmegaConf.structured(PushConfig(repo="me/tiny-vox", gguf=True, merged=True,
                                        dry_run=True))
    again = assemble(dry["run"], p, dry["tmp"] / "again")
    assert [r["files"] for r in again["repos"]] == [r["files"] for r in dry["manifest"]["repos"]]
    assert again["notes"] == []                           # the export is there now: none made


def test_a_bad_repo_exits_2_before_anything_is_written(tiny_run, tmp_path):
    from omegaconf import OmegaConf

    from mens.config.schema import PushConfig
    from mens.errors import ConfigError
    from mens.push.model import check

    run = run_copy(tiny_run, tmp_path / "run")
    p = push(f"run={run}", "push.repo='me/bad name'", "push.dry_run=true", cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    err = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("mens: error (exit 2): push.repo=") \
        and "org/name" in err[0]
    for repo in ("tiny-vox", "me/", "me/a/b"):       # the same check, in-process
        with pytest.raises(ConfigError) as e:
            check(run, OmegaConf.structured(PushConfig(repo=repo, dry_run=True)))
        assert e.value.key == "push.repo" and "org/name" in e.value.message
    assert not (run / "push").exists()


def test_a_full_lane_run_pushes_its_model(tmp_path):
    """lane=full has no adapter: model/ (config, weights, tokenizer) is what the repo holds,
    and the card says transformers, not peft."""
    from huggingface_hub import ModelCard
    from omegaconf import OmegaConf

    from mens.config.compose import compose
    from mens.config.schema import PushConfig
    from mens.plan.output import plan_run
    from mens.push.model import assemble
    from mens.train.run import train_run

    run = tmp_path / "full"
    spec, plan = plan_run(compose([*FAST_TRAIN, "lane=full", "train.max_steps=1"]), run, "train")
    train_run(spec, plan, run)
    m = assemble(run, OmegaConf.structured(PushConfig(repo="me/tiny-full", dry_run=True)))
    files = {f["path"] for f in m["repos"][0]["files"]}
    assert {"README.md", "config.json", "model.safetensors", "tokenizer.json"} <= files
    assert not {f for f in files if f.startswith("adapter")}
    card = ModelCard.load(run / "push" / "model" / "README.md")
    assert card.data.library_name == "transformers" and card.data.base_model == "mens/tiny"
    assert (run / "push" / "model" / "model.safetensors").read_bytes() == \
        (run / "model" / "model.safetensors").read_bytes()


def test_refusals_exit_2_with_one_paragraph(tiny_run, tmp_path):
    unfinished = run_copy(tiny_run, tmp_path / "unfinished")
    (unfinished / "summary.json").unlink()
    p = push(f"run={unfinished}", "push.repo=me/x", "push.dry_run=true", cwd=tmp_path)
    assert p.returncode == 2 and "has no summary.json: the run is unfinished" in p.stderr
    # a real push without HF_TOKEN: refused before the assembly (no push/ written)
    run = run_copy(tiny_run, tmp_path / "run")
    p = push(f"run={run}", "push.repo=me/x", "push.gguf=true", cwd=tmp_path)
    assert p.returncode == 2 and "HF_TOKEN" in p.stderr and not (run / "push").exists()
    # GGUFs of a run whose base was random (never saved): no export possible
    from omegaconf import OmegaConf

    from mens.config.schema import PushConfig
    from mens.errors import ConfigError
    from mens.push.model import assemble

    spec = (run / "spec.yaml").read_text().replace("init: pretrained", "init: random")
    (run / "spec.yaml").write_text(spec)
    with pytest.raises(ConfigError) as e:
        assemble(run, OmegaConf.structured(PushConfig(repo="me/x", gguf=True, dry_run=True)))
    assert e.value.key == "push.gguf" and "rung.init=random" in e.value.message
    assert not (run / "push").exists()
