"""Helpers of the teacher tests: candidates and `teacher` configs pointing at a replay server
(tests/teacher_server.py)."""
from __future__ import annotations

KEY_ENV = "MENS_TEST_TEACHER_KEY"   # the variable holding the key the replay server accepts


def candidate(srv_or_url, model: str, name: str | None = None, **kw) -> dict:
    base_url = srv_or_url if isinstance(srv_or_url, str) else srv_or_url.base_url
    return {"name": name or model, "base_url": base_url, "model": model,
            "api_key_env": kw.pop("api_key_env", KEY_ENV),
            "capabilities": kw.pop("capabilities", ["json_schema"]), **kw}


def teacher_cfg(*candidates: dict, **settings) -> dict:
    """A `teacher` config (the schema's keys) over these candidates; fast retries."""
    from omegaconf import OmegaConf

    from mens.config.schema import TeacherConfig, TeacherEndpoint

    cfg = OmegaConf.structured(TeacherConfig)
    cfg.tier = settings.pop("tier", "custom")
    cfg.candidates = [OmegaConf.merge(OmegaConf.structured(TeacherEndpoint), c)
                      for c in candidates]
    return OmegaConf.merge(cfg, {"backoff_s": 0.01, "max_retries": 2, "timeout_s": 20,
                                 **settings})
