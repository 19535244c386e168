"""`python -m mens.export run=<run dir> [export.*=...]`: ship a finished run — or, with
`adapter=<org/name[@rev]> | <dir>` (and the base's `+rung=…`), a pushed or local PEFT adapter.

Into `<run dir>/export/` (or `export.out`): the merged Hugging Face model (`merged/`), GGUFs of it
(`model-<type>.gguf`), the base GGUF and the LoRA adapter as GGUF (`base-<type>.gguf`,
`adapter.gguf`) for llama.cpp's `--lora` / Ollama's `ADAPTER`, an Ollama `Modelfile`, and
`export.json` (every file with its sha256, the source run, base repo@revision, quant types),
written last. `export.verify=true` then checks the GGUFs against a real llama.cpp (mens/verify.py).

Full-lane runs have no adapter: their trained weights (`model/`) are the merged model. Every file
is written under a temp name and renamed when complete, so an interrupted export leaves no
partial file under a final name (the next export removes the temp leftovers).

Exit 2 (one paragraph, nothing written): no run dir, a run without adapter/ or model/, an adapter
that does not fit the rung's base, an unknown GGUF type, an unwritable destination.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

from omegaconf import DictConfig

from mens.errors import EXIT_OK, ConfigError, RunFailed
from mens.run.rundir import RunDir, atomic_write

DTYPES = ("auto", "bf16", "fp16", "fp32")
KEEP = ("run=", "export.", "rung.path=", "hydra.")   # overrides export honours
# with adapter= the base is the composed rung's: its overrides are honoured too
KEEP_ADAPTER = (*KEEP, "adapter=", "rung=", "rung.", "hw=", "hw.")


def task(cfg: DictConfig, out_dir: Path) -> int:
    from mens.export.gguf import LLAMA_TYPES, NUMPY_TYPES, require_llama_cpp

    ex = cfg.export
    _only_export_overrides(KEEP_ADAPTER if cfg.adapter else KEEP)
    if cfg.run and cfg.adapter:
        raise ConfigError(f"run={cfg.run} and adapter={cfg.adapter}: export one, a run (run=) or "
                          f"an adapter over its base (`+rung=… adapter=…`).", key="adapter")
    run = None if cfg.adapter else _run_dir(cfg.run)
    types = list(dict.fromkeys(ex.gguf))          # keep order, drop repeats
    for t in types + ([ex.base_gguf] if ex.base_gguf else []):
        if t not in NUMPY_TYPES and t not in LLAMA_TYPES:
            key = "export.base_gguf" if t == ex.base_gguf and t not in types else "export.gguf"
            raise ConfigError(f"{key}: unsupported GGUF type `{t}`. gguf-py writes "
                              f"{', '.join(NUMPY_TYPES)}; llama.cpp's quantizer (with "
                              f"llama-cpp-python installed) writes {', '.join(LLAMA_TYPES)}.",
                              key=key)
    for key, t in [("export.gguf", t) for t in types] + [("export.base_gguf", ex.base_gguf)]:
        if t in LLAMA_TYPES:
            require_llama_cpp(t, key)
    if ex.verify:
        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            raise ConfigError("export.verify=true checks the GGUFs with a real llama.cpp, from "
                              "llama-cpp-python: `pip install llama-cpp-python==0.3.36` (builds "
                              "llama.cpp, ~8 min; `make install` does it), or drop export.verify.",
                              key="export.verify") from None
    if ex.dtype not in DTYPES:
        raise ConfigError(f"export.dtype={ex.dtype}: use one of {', '.join(DTYPES)}.",
                          key="export.dtype")
    src = _adapter_source(cfg) if run is None else _source(run, cfg)
    if ex.modelfile and not types and not (src["adapter"] and ex.adapter_gguf and ex.base_gguf):
        raise ConfigError("export.modelfile=true needs a GGUF for FROM: keep export.gguf non-empty "
                          "(or export.adapter_gguf with export.base_gguf), or set "
                          "export.modelfile=false.", key="export.modelfile")
    out = _writable(Path(ex.out) if ex.out else
                    RunDir(run).export if run else Path(out_dir) / "export" / src["label"])
    t0 = time.time()
    try:
        manifest = build(src, out, ex, types)
    except BaseException:
        # a Ctrl-C can land between a temp's creation and the try that guards it (the signal
        # is handled inside pathlib's mkdir/open): sweep this process's temps on the way out
        _clear_temps(out, f".*.tmp{os.getpid()}")
        raise
    print(f"mens: export done in {time.time() - t0:.1f} s · {out}")
    from mens.export.lineage import log_export
    # the training run's logger: wandb there → the GGUFs as an artifact beside its adapter
    if run and log_export(run, src["logger"], out, manifest["files"], src["lane"]):
        print("  wandb: the GGUFs logged as an artifact (job_type export)")
    if ex.verify:
        from mens.export.verify import report_lines, verify_export

        result = verify_export(out, manifest, src)
        for line in report_lines(result):
            print(f"  verify: {line}")
        manifest["verify"] = result
        _write_manifest(out, manifest)
        if not result["ok"]:
            raise RunFailed(f"verification against llama.cpp failed: {'; '.join(result['failed'])}"
                            f" (details in {out / 'export.json'}).")
    return EXIT_OK


def build(src: dict, out: Path, ex, types: list[str]) -> dict:
    """Write every requested file (each atomically), then the manifest. Returns the manifest."""
    from mens.export.gguf import (LLAMA_TYPES, LOSSLESS, llama_quantize, preflight, scratch_path,
                                 write_adapter_gguf, write_model_gguf)
    from mens.export.merge import MergedWeights, SafetensorsDir, write_hf_dir

    # every refusal (an architecture or tokenizer llama.cpp cannot take) before any file
    # (a merged-only export, export.gguf=[], writes no GGUF and so is refused nothing here)
    adapter_gguf = src["adapter"] is not None and ex.adapter_gguf
    notes: list[str] = list(src["notes"])
    if adapter_gguf and src["adapter"].experts and types:
        # llama.cpp's LoRA GGUF holds no expert LoRA; the model GGUFs, merged, hold it whole —
        # so the default export gives those and says what it left out (with no model GGUF
        # asked for, check_adapter_gguf refuses below: nothing would hold the adapter)
        adapter_gguf = False
        notes.append("FALLBACK adapter GGUF: not written — the adapter puts LoRA on the "
                     "experts' fused weights (lane.lora.experts=true), which llama.cpp's LoRA "
                     "GGUF cannot hold; the merged model GGUFs carry it")
        print(f"mens: {notes[-1]}")
    notes += (
        preflight(src["config_dir"], src["adapter"] if adapter_gguf else None)
        if types or adapter_gguf else [])
    files: list[dict] = []
    base = SafetensorsDir(src["weights"])
    merged = MergedWeights(base, src["adapter"], ex.dtype, src["qlora"])
    hf_dir, gsrc = src["config_dir"], merged
    if ex.merged:
        hf_dir = write_hf_dir(merged, src["config_dir"], out / "merged", notes)
        gsrc = SafetensorsDir(hf_dir)         # the GGUFs hold exactly what merged/ holds
        files += [_entry(out, p, "merged", merged.out_dtype if p.suffix == ".safetensors" else None)
                  for p in sorted(hf_dir.iterdir())]
        print(f"  merged/      {_mib(hf_dir)} ({merged.out_dtype}) — HF model dir")
    name = f"{src.get('label') or src['run'].name}-{src['lane']}"
    lossless = LOSSLESS[merged.out_dtype]
    for t in [t for t in types if t not in LLAMA_TYPES]:
        p = write_model_gguf(gsrc, hf_dir, out / f"model-{t}.gguf", t, name)
        files.append(_entry(out, p, "gguf", t))
        print(f"  {p.name:<24} {_mib(p)}")
    for t in [t for t in types if t in LLAMA_TYPES]:   # K-quants from a lossless GGUF
        have = out / f"model-{lossless}.gguf"
        with scratch_path(out / f"lossless-{lossless}.gguf") as tmp:
            if not have.is_file():
                write_model_gguf(gsrc, hf_dir, tmp, lossless, name)
            p = llama_quantize(have if have.is_file() else tmp, out / f"model-{t}.gguf", t)
        files.append(_entry(out, p, "gguf", t))
        print(f"  {p.name:<24} {_mib(p)} (llama.cpp quantizer)")
    adapter_file = base_file = None
    if adapter_gguf:
        p = write_adapter_gguf(src["adapter"], src["config_dir"], out / "adapter.gguf", name)
        adapter_file = p.name
        files.append(_entry(out, p, "adapter_gguf", "f32"))
        lora = src["adapter"]
        print(f"  {p.name:<24} {_mib(p)} (LoRA r={lora.r}, alpha={lora.alpha:g})")
        if ex.base_gguf:
            bsrc = MergedWeights(base, None, ex.dtype, src["qlora"])   # the base the adapter saw
            p = out / f"base-{ex.base_gguf}.gguf"
            if ex.base_gguf in LLAMA_TYPES:
                with scratch_path(out / f"base-lossless-{lossless}.gguf") as tmp:
                    write_model_gguf(bsrc, src["config_dir"], tmp, lossless, name + "-base")
                    llama_quantize(tmp, p, ex.base_gguf)
            else:
                write_model_gguf(bsrc, src["config_dir"], p, ex.base_gguf, name + "-base")
            base_file = p.name
            files.append(_entry(out, p, "base_gguf", ex.base_gguf))
            print(f"  {p.name:<24} {_mib(p)} (base for adapter.gguf)")
    chat: dict = {}               # the GGUF's chat template and the Modelfile's TEMPLATE
    if ex.modelfile:
        files += _modelfiles(out, src, types, base_file, adapter_file, notes, chat)
    manifest = {
        "source_run": str(src["run"]) if src["run"] else None,
        "source_adapter": src.get("adapter_source"), "lane": src["lane"], "base": src["base"],
        "merge": {"dtype": merged.out_dtype, "qlora_dequantized": src["qlora"],
                  "adapter": None if src["adapter"] is None else
                  {"r": src["adapter"].r, "alpha": src["adapter"].alpha,
                   "targets": len(src["adapter"].pairs)}},
        "gguf_types": types, "base_gguf": ex.base_gguf if base_file else None,
        "chat": chat or None, "files": files, "notes": notes,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "versions": _versions()}
    _write_manifest(out, manifest)
    for n in notes:
        print(f"  note: {n}")
    return manifest


def _modelfiles(out: Path, src: dict, types, base_file, adapter_file, notes,
                chat: dict) -> list[dict]:
    from mens.export.modelfile import modelfile_plan, modelfile_text, summary

    tool_format = src.get("tool_format", "native")     # how the run wrote tool calls
    template, _, more = modelfile_plan(src["config_dir"], tool_format)
    notes += more                  # e.g. a chat format Ollama cannot express, tools it cannot
    chat.update(summary(src["config_dir"], template, tool_format))
    merged = next((f"model-{t}.gguf" for t in types), None)
    pairs = []
    if base_file and adapter_file:
        pairs.append(("Modelfile", base_file, adapter_file))
        if merged:
            pairs.append(("Modelfile.merged", merged, None))
    elif merged:
        pairs.append(("Modelfile", merged, None))
    entries = []
    for fname, frm, adapter in pairs:
        atomic_write(out / fname, modelfile_text(frm, adapter, src.get("ref") or str(src["run"]),
                                                 hf_dir=src["config_dir"],
                                                 tool_format=tool_format))
        entries.append(_entry(out, out / fname, "modelfile", None))
        print(f"  {fname:<24} FROM {frm}" + (f" + ADAPTER {adapter}" if adapter else ""))
    return entries


def _source(run: Path, cfg) -> dict:
    """What to export from a run dir: weights dir, adapter, QLoRA settings, base identity."""
    from mens.export.merge import SafetensorsDir, check_adapter, load_adapter
    from mens.model.load import weights_dir
    from mens.plan.spec import load_rerun

    rc = load_rerun(str(run))
    if cfg.rung.path:
        rc.rung.path = cfg.rung.path           # the base's weights live elsewhere on this machine
    lane, notes = rc.lane.method, []
    tool_format = getattr(rc.data, "tool_format", "native")
    if lane == "full":
        model = RunDir(run).model
        if RunDir(run).artifact != model:
            raise ConfigError(f"{run} is a full-lane run without model/ (its trained weights): "
                              f"the run did not finish. Resume it (`python -m mens resume={run}`).",
                              key="run")
        return {"run": run, "lane": lane, "weights": model, "config_dir": model, "adapter": None,
                "qlora": None, "notes": ["full lane: the trained weights are the merged model"],
                "base": _base_identity(rc), "spoke": rc.spoke, "logger": rc.logger,
                "tool_format": tool_format}
    adapter_dir = RunDir(run).adapter
    if not adapter_dir.is_dir():
        raise ConfigError(f"{run} has no adapter/ (and no model/): only a finished LoRA, QLoRA or "
                          f"DPO run has an adapter to merge. Give a finished run dir (one with "
                          f"summary.json), or resume this one (`python -m mens resume={run}`).",
                          key="run")
    if rc.rung.init == "random":
        raise ConfigError(f"{run} trained on random weights (rung.init=random), which were never "
                          f"saved: there is no base to merge the adapter into.", key="run")
    base = weights_dir(rc.rung)
    qlora = None
    if lane == "qlora":
        q = rc.lane.quantization
        qlora = {"type": q.type, "blocksize": q.blocksize, "double_quant": q.double_quant,
                 "precision": rc.lane.precision}
        notes.append(f"QLoRA: merged into the base dequantized from {q.type} (blocksize "
                     f"{q.blocksize}, double_quant {q.double_quant}, quantised from "
                     f"{rc.lane.precision}) — the weights the adapter was trained against; the "
                     f"base GGUF holds them too")
    adapter = load_adapter(adapter_dir)
    check_adapter(adapter, SafetensorsDir(base))     # before anything is written
    return {"run": run, "lane": lane, "weights": base, "config_dir": base,
            "adapter": adapter, "qlora": qlora, "notes": notes, "tool_format": tool_format,
            "base": _base_identity(rc), "spoke": rc.spoke, "logger": rc.logger}


def _adapter_source(cfg) -> dict:
    """What to export from `adapter=` (mens.source.hub.fetch_adapter): the composed rung's base
    (downloaded when missing, as training would) and the adapter, checked against it."""
    from omegaconf import OmegaConf

    from mens.export.merge import SafetensorsDir, check_adapter, load_adapter
    from mens.model.load import weights_dir
    from mens.source.hub import fetch_adapter
    from mens.plan.adapter import check_adapter_fits
    from mens.source.resolve import fetch_base, fill_hf_rung

    rc, notes = cfg.copy(), []
    if OmegaConf.is_missing(rc.rung, "hidden_size"):   # +rung=hf: from the model's config.json
        fill_hf_rung(rc, notes)
    r = rc.rung
    if r.init == "random":
        raise ConfigError(f"rung {r.name} is rung.init=random: random weights are never saved, "
                          f"so there is no base to merge adapter={rc.adapter} into.", key="rung")
    path, source = fetch_adapter(rc.adapter)
    check_adapter_fits(path, r, rc.adapter)
    fetch_base(r)                                     # the base's weights, as training gets them
    base = weights_dir(r)
    adapter = load_adapter(path)
    check_adapter(adapter, SafetensorsDir(base))     # before anything is written
    ref = f"{source['repo_id']}@{source['commit']}" if "commit" in source else str(path)
    notes.append(f"adapter {ref}: exported as a plain LoRA adapter over {r.name} (were it "
                 f"trained with QLoRA, it merges here into the unquantized base)")
    return {"run": None, "label": source["repo_id"].split("/")[-1] if "commit" in source
            else path.name, "ref": ref, "adapter_source": source, "lane": "lora",
            "weights": base, "config_dir": base, "adapter": adapter, "qlora": None,
            "notes": notes, "base": _base_identity(rc), "spoke": rc.spoke, "logger": rc.logger}


def _base_identity(rc) -> dict:
    r = rc.rung
    out = {"rung": r.name, "repo_id": r.repo_id, "revision": r.revision, "path": r.path}
    if r.tokenizer_bundled:              # embedded: its weights' sha256 is the revision
        from mens.resources import ASSETS
        sums = (ASSETS / r.name / "SHA256SUMS").read_text().split()
        out["resolved"] = "sha256:" + sums[sums.index("model.safetensors") - 1]
    elif not r.path:
        from mens.source.weights import find_weights
        st = find_weights(r.repo_id, getattr(r, "commit", None) or r.revision)
        out["resolved"] = st.resolved_revision
    out["ref"] = f"{r.repo_id}@{out.get('resolved') or r.revision or 'unpinned'}"
    return out


def _run_dir(run) -> Path:
    if not run:
        raise ConfigError("no run given: `python -m mens.export run=<run dir>` (a finished run, "
                          "e.g. outputs/<date>/<time>_train).", key="run")
    path = Path(run).expanduser().resolve()
    if not path.is_dir():
        raise ConfigError(f"run={run}: no such directory. Give a run dir mens wrote "
                          f"(outputs/<date>/<time>_train).", key="run")
    if not RunDir(path).finished:
        raise ConfigError(f"run={run} has no summary.json: the run is unfinished (or not a mens "
                          f"run dir). Export a finished run, or resume this one first.", key="run")
    return path


def _writable(out: Path) -> Path:
    """Create the destination and prove it takes a file; clear an interrupted export's temps."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".probe{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise ConfigError(f"export destination {out} is not writable ({e.strerror or e}): choose "
                          f"another with `export.out=<dir>`.", key="export.out") from None
    _clear_temps(out, ".*.tmp*")
    return out


def _clear_temps(out: Path, pattern: str) -> None:
    for stale in out.glob(pattern):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)


def _only_export_overrides(keep=KEEP) -> None:
    from hydra.core.hydra_config import HydraConfig

    from mens.config.compose import DEFAULT_GROUPS

    injected = {f"+{g}={o}" for g, o in DEFAULT_GROUPS.items()}
    extra = [o for o in HydraConfig.get().overrides.task
             if o not in injected and not o.lstrip("+").startswith(keep)]
    if extra:
        if keep is KEEP_ADAPTER:
            raise ConfigError(f"export of adapter= reads the base (+rung=, rung.*) and export.*, "
                              f"so {' '.join(extra)} would be ignored: drop it.",
                              key=extra[0].split("=")[0])
        raise ConfigError(f"export reads the run's own spec, so {' '.join(extra)} would be "
                          f"ignored: drop it. Export takes run=, export.* and rung.path= (where "
                          f"the base weights are on this machine).", key=extra[0].split("=")[0])


def _entry(out: Path, p: Path, kind: str, quant) -> dict:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return {"path": str(p.relative_to(out)), "kind": kind, "quant": quant,
            "bytes": p.stat().st_size, "sha256": h.hexdigest()}


def _write_manifest(out: Path, manifest: dict) -> None:
    atomic_write(out / "export.json", json.dumps(manifest, indent=2))


def _mib(p: Path) -> str:
    n = sum(f.stat().st_size for f in p.iterdir()) if p.is_dir() else p.stat().st_size
    return f"{n / 2**20:8.2f} MiB"


def _versions() -> dict:
    import importlib.metadata as md
    out = {}
    for pkg in ("mens", "gguf", "torch", "transformers", "peft", "safetensors", "llama_cpp_python"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out
