"""The one error of the OpenAI-compatible API: a status and OpenAI's error body
`{"error": {"message", "type", "param", "code"}}` (mens.serve.openai_api answers it)."""
from __future__ import annotations


class APIError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None, type: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = status, message, param, code, type


def error_body(message: str, type: str = "invalid_request_error", param=None, code=None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}
