"""Push stage (issue #29): a finished run, or a synthesized dataset, to the Hugging Face Hub.

    mens push run=DIR push.repo=ORG/NAME [push.gguf=true push.merged=true push.dry_run=true]
      run.py       the task: check → token → assemble → upload each repo → push.json
      model.py     assemble DIR/push/: model/ (adapter in PEFT layout or the full model, card,
                   merged/ on request), gguf/ (renamed GGUFs, Modelfile, GGUF card), push.json
      card.py      the model card (README.md) from the run dir's evidence: spec, plan, summary,
                   telemetry, eval.json, gate.json — YAML via huggingface_hub's ModelCardData
      base.py      what the cards say of the base: identity, licence (LICENSE.md when `other`)
      usage.py     how to run it (PEFT, vLLM, llama.cpp, Ollama) and the GGUF repo's card
      hub.py       the upload client: HF_TOKEN from the environment only, create_repo / branch /
                   one commit per repo, unchanged files not sent
    mens data push synth.out=DIR push.repo=ORG/NAME
      dataset.py, dataset_card.py   a synthesized dataset as a Hub dataset repo (Parquet splits)

Reads the run dir through mens.run.rundir.RunDir; writes only under DIR/push/ (and, when merged
or GGUFs are asked and the run has no export, DIR/export/ through `mens export`).
"""
