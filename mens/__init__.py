"""mens: a declarative compiler of LLM fine-tuning runs. The tree reads as the pipeline, each
package importing only the ones above it in this list (tests/test_imports.py: ORDER):

    errors, resources, run/   exit codes; what ships; what a run directory holds (layout, atomic
                              writes, receipts, hashing, the telemetry vocabulary)
    config/     overrides → a composed, validated config (schemas, Hydra compose, errors)
    source/     where a model comes from: families, config.json, hub cache and downloads
    data/       corpora and user data → records → tokenized, packed rows by curriculum
    synth/      the data studio: topic trees, teachers, synthesis, oracles, curation
    plan/       config → RunSpec + Plan against the memory contract (no torch: instant)
    model/      rung + lane + backend → model and tokenizer (the one loading API)
    train/      RunSpec + Plan → a finished run dir (Lightning, telemetry, meter)
    export/     run dir → merged model, GGUF, GGUF adapter, Modelfile
    serve/      run dirs → an OpenAI-compatible server with adapter slots
    calibrate/  shapes → measured peaks → fitted contract cells, report
    cloud/      estimates, recommendations and SkyPilot launches
    compare/    run dirs → base vs fine-tuned, or runs side by side
    gate/       release gates and their receipts; ladder/, afk/, studio/ above them
    cli/        the shell: `mens <command>` and `python -m mens…`
"""
