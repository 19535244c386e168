"""Request size limits in front of the API: a body over the cap gets 413, a request line +
headers over the cap 431 — both as JSON in OpenAI's error shape, before any model work.

Neither Starlette nor uvicorn has a body limit; uvicorn's h11 parser has a header-block limit
(`h11_max_incomplete_event_size`) but answers it with a plain 400. Hence the two small pieces
here: an ASGI middleware, and uvicorn's h11 protocol with the right status.
"""
from __future__ import annotations

import json

from starlette.exceptions import HTTPException


def error_body(message: str, code: str) -> dict:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None,
                      "code": code}}


class Limits:
    """ASGI middleware: a request line + headers over `header_limit` bytes gets 431, a body
    over `limit` bytes 413, both in OpenAI's error shape.

    uvicorn's h11 parser enforces its size cap only while a header block is still incomplete;
    one that arrives in a single read passes, so the total is checked here too. Starlette has
    no body-size limit of its own. A declared Content-Length over the limit is
    refused before reading; a body without one (chunked) is counted as it arrives. The rest of
    an oversize body is read and dropped (up to 16x the limit) before answering, because
    closing a socket with unread data makes the kernel reset it, and the client could lose
    the 413 on the way.
    """

    def __init__(self, app, limit: int, header_limit: int):
        self.app, self.limit, self.header_limit = app, limit, header_limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        head = len(scope["method"]) + len(scope.get("raw_path") or b"") + \
            len(scope.get("query_string") or b"") + sum(len(k) + len(v) + 4 for k, v in scope["headers"])
        if head > self.header_limit:
            return await self._refuse(send, 431, "The request line and headers are over "
                                      f"{self.header_limit} bytes.", "request_header_fields_too_large")
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            if int(declared) <= 16 * self.limit:
                await self._drain(receive)
            return await self._refuse(send, 413, f"The request body is over {self.limit} bytes.",
                                      "request_too_large")
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    if message.get("more_body"):
                        await self._drain(receive)
                    raise HTTPException(413, f"The request body is over {self.limit} bytes.")
            return message

        return await self.app(scope, counted, send)

    async def _drain(self, receive) -> None:
        got = 0
        while got <= 16 * self.limit:
            message = await receive()
            if message["type"] != "http.request":
                return
            got += len(message.get("body", b""))
            if not message.get("more_body"):
                return

    @staticmethod
    async def _refuse(send, status: int, message: str, code: str) -> None:
        body = json.dumps(error_body(message, code)).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def h11_with_431():
    """uvicorn's h11 protocol, answering an oversize header block with 431 instead of 400.

    h11 raises RemoteProtocolError(error_status_hint=431) when the request line + headers pass
    `h11_max_incomplete_event_size`, but uvicorn answers every protocol error with 400. The
    hint is caught on its way out of `next_event` and used for the status.
    """
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class H11With431(H11Protocol):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._status_hint = 400
            next_event = self.conn.next_event

            def tracked():
                try:
                    return next_event()
                except h11.RemoteProtocolError as e:
                    self._status_hint = e.error_status_hint
                    raise
            self.conn.next_event = tracked

        def send_400_response(self, msg: str) -> None:
            if self._status_hint != 431:
                return super().send_400_response(msg)
            body = json.dumps(error_body("The request line and headers are over "
                                         "serve.max_header_bytes.",
                                         "request_header_fields_too_large")).encode()
            headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
            for event in (h11.Response(status_code=431, headers=headers,
                                       reason=b"Request Header Fields Too Large"),
                          h11.Data(data=body), h11.EndOfMessage()):
                self.transport.write(self.conn.send(event))
            self.transport.close()

    return H11With431
