"""Teachers for the data studio (issue #15): structured output from any OpenAI-compatible
endpoint, through a cascade of candidates, counted per teacher.

    from mens.synth.teacher import Teacher
    teacher = Teacher.from_config(cfg.teacher)
    reply = teacher.ask("mens_samples", [{"role": "system", "content": ...},
                                         {"role": "user", "content": ...}])
    reply.data      # {"samples": [{"prompt", "response"}, ...]} (valid ones only) or None
    reply.problems  # why something was dropped / unusable; reply.dropped: the samples left out
    reply.teacher, reply.model, reply.usage   # provenance and cost
    teacher.ledger.write(path)                # per-teacher stats JSON

Modules: `schemas` (mens_subtopics, mens_samples, mens_repair, mens_judgement; `check`),
`client` (one endpoint: response_format or the schema in the prompt, retries, usage),
`routing` (the `teacher=` tiers and their fall-through), `stats` (the ledger). Heavy imports
(openai, httpx) happen on the first request.
"""
from mens.synth.teacher.client import Endpoint, Reply, Settings, TeacherUnavailable, Usage
from mens.synth.teacher.routing import Teacher
from mens.synth.teacher.schemas import NAMES, SCHEMAS, check
from mens.synth.teacher.stats import Ledger

__all__ = ["Teacher", "Reply", "Usage", "Endpoint", "Settings", "TeacherUnavailable", "Ledger",
           "NAMES", "SCHEMAS", "check"]
