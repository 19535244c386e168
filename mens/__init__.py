"""mens: a declarative compiler of LLM fine-tuning runs. The tree reads as the pipeline:

    config/     overrides → a composed, validated config (schemas, Hydra compose, errors)
    plan/       config → RunSpec + Plan against the memory contract (no torch: instant)
    data/       corpora and user data → records → tokenized, packed rows by curriculum
    model/      rung + lane + backend → model and tokenizer (the one loading API)
    train/      RunSpec + Plan → a finished run dir (Lightning, telemetry, meter)
    export/     run dir → merged model, GGUF, GGUF adapter, Modelfile
    serve/      run dirs → an OpenAI-compatible server with adapter slots
    compare/    run dirs → base vs fine-tuned, or runs side by side
    calibrate/  shapes → measured peaks → fitted contract cells, report
    cli/        the shell: `mens <command>` and `python -m mens…`

Beside them: errors (exit codes), rundir (the run directory), resources (what ships).
"""
