"""Serve stage. In: run dirs / PEFT adapters on one base. Out: an OpenAI-compatible HTTP server
(FastAPI on uvicorn) with adapter slots, champion/challenger aliases and SSE streaming
(server.py, openai_api.py, slots.py, generate.py). Imports nothing from mens.train."""
