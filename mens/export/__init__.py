"""Export stage. In: a finished run dir. Out: <run>/export/ — a merged HF model, GGUFs of it,
the base GGUF + GGUF LoRA adapter, an Ollama Modelfile and export.json (build.py), optionally
verified against a real llama.cpp (verify.py). Imports nothing from mens.train."""
