"""Exit codes and one-paragraph errors, the same for every mens command.

0 success · 2 bad config, input or environment · 3 the planner refuses · 4 the run failed while
running · 130 interrupted after checkpointing. This module imports nothing from mens (every
stage raises these); mens.config.explain turns Hydra's and OmegaConf's exceptions into a
ConfigError so that no command prints a traceback (unless HYDRA_FULL_ERROR=1).
"""
from __future__ import annotations

from pathlib import Path

EXIT_OK, EXIT_CONFIG, EXIT_REFUSED, EXIT_FAILED, EXIT_INTERRUPTED = 0, 2, 3, 4, 130


class MensError(Exception):
    code = EXIT_CONFIG

    def __init__(self, message: str, key: str | None = None):
        super().__init__(message)
        self.message = " ".join(message.split())  # one paragraph, whatever the source
        self.key = key


class ConfigError(MensError):
    """Bad config, input or environment (exit 2)."""
    code = EXIT_CONFIG


class PlanRefused(MensError):
    """The planner refuses the run (exit 3). `plan` holds the full Plan."""
    code = EXIT_REFUSED

    def __init__(self, message: str, plan=None):
        super().__init__(message)
        self.plan = plan


class RunFailed(MensError):
    """The run failed while running (exit 4)."""
    code = EXIT_FAILED


class Interrupted(MensError):
    """Ctrl-C (exit 130): in training, after the checkpoint was saved."""
    code = EXIT_INTERRUPTED


class DataError(ConfigError):
    """Bad data (exit 2): one paragraph naming file:line, the key and the fix."""

    def __init__(self, message: str, path: Path | str | None = None, line: int | None = None,
                 key: str | None = None):
        where = f"{path}:{line}" if line is not None else f"{path}"
        super().__init__(f"{where}: {message}" if path is not None else message, key=key)
        self.path, self.line = (str(path) if path is not None else None), line
