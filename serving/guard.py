"""What every served route checks before a body is parsed: its size, its encoding and its nesting.

A JSON body nested 1,000 levels deep made the parsers recurse until ``RecursionError`` (a 500 on
``/recommend/batch`` and ``/jobs``, and the keep-alive connection reset for the next request;
issue 57). :class:`Guard` reads the body first (it is read whole by every route anyway), within the
size limit, and answers 400 for a body nested deeper than :data:`MAX_DEPTH` or not UTF-8, and 413
for one over the limit, before any parser sees it; the body is then replayed to the route, so the
connection stays usable. Every 4xx is counted in the service's ``rejected`` counter.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from fastapi.responses import JSONResponse

MAX_DEPTH = 32  # a record is 3 levels deep, a batch 4: far below, and far below Python's recursion limit
NOT_UTF8 = ("body: not UTF-8 (it looks like UTF-16 or UTF-32); JSON over HTTP is UTF-8 (RFC 8259): "
            "send the body UTF-8 encoded")
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)  # a JSON string: brackets inside it do not nest
_OPEN = np.zeros(256, np.int8)
_OPEN[[ord("["), ord("{")]] = 1
_OPEN[[ord("]"), ord("}")]] = -1


def _not_utf8(head: bytes) -> bool:
    """Whether a body's first bytes are UTF-16/32 JSON (a byte order mark, or a NUL among the first four
    bytes, which UTF-8 JSON never has): what ``json.loads`` would silently decode."""
    return head.startswith((b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")) or b"\x00" in head[:4]


def nesting_depth(body: bytes) -> int:
    """The deepest nesting of arrays and objects in a JSON text, strings skipped (vectorized: a
    regular expression drops the strings, a cumulative sum counts the brackets)."""
    if b"[" not in body and b"{" not in body:
        return 0
    bare = np.frombuffer(_STRING.sub(b"", body), np.uint8)
    if not len(bare):
        return 0
    return int(np.cumsum(_OPEN[bare], dtype=np.int64).max(initial=0))


class Guard:
    """ASGI middleware: 413 with a JSON message for a body over ``limit`` bytes (checked from
    Content-Length before reading, and while reading a body sent without one), 400 for a body that
    is UTF-16 or UTF-32 rather than UTF-8 or nested deeper than ``max_depth``, and a count of every
    4xx response in the service's ``rejected`` counter."""

    def __init__(self, app: Any, svc: Any, limit: int, max_depth: int = MAX_DEPTH):
        self.app, self.svc, self.limit, self.max_depth = app, svc, limit, max_depth

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counting_send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start" and 400 <= message["status"] < 500:
                with self.svc._lock:
                    self.svc.counters["rejected"] += 1
            await send(message)

        async def reject(status: int, detail: str) -> None:
            await JSONResponse({"detail": detail}, status_code=status)(scope, receive, counting_send)

        too_large = f"body: larger than the limit of {self.limit} bytes (see max_batch)"
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            await reject(413, too_large)
            return
        if scope["method"] in ("GET", "HEAD", "OPTIONS", "DELETE") and length in (None, b"0"):
            await self.app(scope, receive, counting_send)
            return
        # Read the whole body (within the limit) before any route parses it.
        parts: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.limit:
                await reject(413, too_large)
                return
            parts.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(parts)
        if body and _not_utf8(body):
            await reject(400, NOT_UTF8)
            return
        depth = nesting_depth(body)
        if depth > self.max_depth:
            await reject(400, f"body: JSON nested {depth} levels deep; at most {self.max_depth} are accepted")
            return
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: wait for the disconnect, as the server would

        await self.app(scope, replay, counting_send)
