"""How to run a pushed model: the card's usage section (transformers + PEFT, vLLM, llama.cpp,
Ollama) and the GGUF repo's own card (README.md of <repo>-GGUF)."""
from __future__ import annotations

from pathlib import Path

from mens.push.base import LICENSE_FILE, base_license
from mens.run.rundir import RunDir


def usage_section(repo_id, base, lane, full, gguf_repo, files: dict) -> list[str]:
    rev = f', revision="{base["revision"]}"' if base["revision"] else ""
    name = repo_id.split("/")[-1]
    if full:
        py = ["from transformers import AutoModelForCausalLM, AutoTokenizer", "",
              f'model = AutoModelForCausalLM.from_pretrained("{repo_id}")',
              f'tok = AutoTokenizer.from_pretrained("{repo_id}")']
    else:
        py = ["from peft import PeftModel", "from transformers import AutoModelForCausalLM, "
              "AutoTokenizer", "",
              f'base = AutoModelForCausalLM.from_pretrained("{base["repo_id"]}"{rev})',
              f'tok = AutoTokenizer.from_pretrained("{base["repo_id"]}"{rev})',
              f'model = PeftModel.from_pretrained(base, "{repo_id}")']
    out = ["## How to run it", ""]
    if base["bundled"]:
        out += [f"`{base['repo_id']}` is not a Hub repository: it ships inside mens "
                f"(`mens/assets/{base['name']}`, `pip install mens`); pass that directory where "
                f"the snippets below name `{base['repo_id']}`.", ""]
    out += ["transformers" + ("" if full else " + PEFT") + ":", "", "```python", *py, "```", ""]
    if not full:
        r = (lane.get("lora") or {}).get("r", 16)
        out += ["vLLM:", "", "```bash", f"vllm serve {base['repo_id']} --enable-lora "
                f"--max-lora-rank {max(16, r)} --lora-modules {name}=$(hf download {repo_id})",
                "```", ""]
    if gguf_repo:
        g = gguf_repo
        out += [f"llama.cpp and Ollama: the GGUFs are in [{g}](https://huggingface.co/{g}):", "",
                "```bash", f"hf download {g} --local-dir {g.split('/')[-1]} && cd "
                f"{g.split('/')[-1]}"]
        model = _pick(files, "model", "<model GGUF>")
        out.append(f"llama-cli -m {model} -p 'Hello'")
        if not full:
            out.append(f"llama-cli -m {_pick(files, 'base', '<base GGUF>')} --lora "
                       f"{_pick(files, 'LoRA', '<LoRA GGUF>')} -p 'Hello'")
        out += [f"ollama create {name} -f Modelfile", "```", ""]
    else:
        out += ["llama.cpp (`--lora`) and Ollama (`ollama create -f Modelfile`): no GGUFs were "
                "pushed with this model; `mens export run=<run dir>` writes them, `mens push "
                "push.gguf=true` publishes them.", ""]
    return out


def gguf_card(run_dir: Path | str, gguf_repo: str, model_repo: str, files: dict[str, str]) -> str:
    """README.md of the GGUF repo: {file name: what it is}; base_model: the adapter repo."""
    from huggingface_hub import ModelCard, ModelCardData

    spec = RunDir(run_dir).read_spec()
    lic, lic_note = base_license(spec)
    name = model_repo.split("/")[-1]
    cd = ModelCardData(base_model=model_repo, base_model_relation="quantized", license=lic,
                       license_name="base-model-license" if lic == "other" else None,
                       license_link=LICENSE_FILE if lic == "other" else None,
                       library_name="gguf", pipeline_tag="text-generation",
                       tags=["gguf", "llama.cpp", "ollama", "mens"])
    model = _pick(files, "model", "<model GGUF>")
    lora, basef = _pick(files, "LoRA", None), _pick(files, "base", None)
    body = [f"# {gguf_repo.split('/')[-1]}", "",
            f"GGUF files of [{model_repo}](https://huggingface.co/{model_repo}) (its card holds "
            f"the training and evaluation evidence), written by `mens export`. File names follow "
            f"the GGUF naming convention `<Name>-<Encoding>[-LoRA].gguf`.", "",
            f"License: `{lic}` — {lic_note}.", "", "| file | what |", "|---|---|",
            *[f"| {f} | {w} |" for f, w in files.items()], "", "## llama.cpp", "", "```bash",
            f"llama-cli -m {model} -p 'Hello'"]
    if lora and basef:
        body.append(f"llama-cli -m {basef} --lora {lora} -p 'Hello'")
    body += ["```", "", "## Ollama", "", "```bash", f"ollama create {name} -f Modelfile",
             f"ollama run {name}", "```", ""]
    return str(ModelCard(f"---\n{cd.to_yaml()}\n---\n\n" + "\n".join(body)))


def _pick(files: dict[str, str], what: str, default):
    """The first GGUF whose description starts with `what` (model / base / LoRA)."""
    return next((f for f, w in files.items() if w.startswith(what)), default)
