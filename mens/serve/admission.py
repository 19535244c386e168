"""A bounded queue in front of the single model thread (`serve.max_queue`).

Every generation request holds a `Place` from the moment it is admitted until its generation
ends (a stream: until the model thread is done with it, even if the client left). One place is
the request the model thread runs; `max_queue` more may wait. Beyond that a request is answered
at once with 503 and `Retry-After` (OpenAI's error shape), instead of waiting behind a burst
with no bound. The count is shared by the event loop and the model thread's callbacks: a lock.

A place is given back by whoever ends the request: the model thread once it was handed the
work (`run_by`), else the response's own close (`abandon`) — a stream whose client left before
its body started may never run its generator at all, so nothing inside the generator can own
the release. `release` is idempotent, so both paths may fire.
"""
from __future__ import annotations

import math
import threading
import time


class QueueFull(Exception):
    def __init__(self, depth: int, limit: int, retry_after: int):
        super().__init__(f"The server is busy: {depth} requests are waiting for the model "
                         f"(serve.max_queue={limit}). Retry after {retry_after} s.")
        self.retry_after = retry_after


class Admission:
    def __init__(self, max_queue: int):
        self.max_queue = max(int(max_queue), 0)
        self._lock = threading.Lock()
        self._in_flight = 0
        self._mean_s = 1.0        # running mean of one generation's seconds (for Retry-After)

    def enter(self) -> "Place":
        """Take a place or raise QueueFull."""
        with self._lock:
            if self._in_flight > self.max_queue:      # one running + max_queue waiting
                depth = self._in_flight - 1
                raise QueueFull(depth, self.max_queue,
                                max(1, math.ceil(self._mean_s * (depth + 1))))
            ahead = self._in_flight
            self._in_flight += 1
        return Place(self, time.monotonic(), ahead)

    def _leave(self, started: float, ahead: int) -> None:
        with self._lock:
            self._in_flight -= 1
            # it waited for the `ahead` requests before it, then ran: one generation's share
            took = (time.monotonic() - started) / (ahead + 1)
            self._mean_s = 0.8 * self._mean_s + 0.2 * took

    def state(self) -> dict:
        with self._lock:
            return {"depth": max(self._in_flight - 1, 0), "in_flight": self._in_flight,
                    "max_queue": self.max_queue}


class Place:
    """One admitted request's place; given back exactly once (see the module's docstring)."""

    def __init__(self, admission: Admission, started: float, ahead: int):
        self._admission, self._started, self._ahead = admission, started, ahead
        self._lock = threading.Lock()
        self._released = False
        self._work = None

    def run_by(self, fut) -> None:
        """The model thread has the request (a concurrent Future): it gives the place back
        when it is done with it, whether or not the client is still there."""
        self._work = fut
        fut.add_done_callback(lambda f: self.release())

    def abandon(self) -> None:
        """The response is over: a place whose work never reached the model thread is free."""
        if self._work is None:
            self.release()

    def release(self) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
        self._admission._leave(self._started, self._ahead)
