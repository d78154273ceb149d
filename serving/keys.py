"""API keys and a per-key rate limit (issue 57 item 5): callers say who they are.

Keys are optional. Give them as a file of SHA-256 hashes (``serve.py --api-keys FILE``: one
``NAME:HEX`` or ``HEX`` per line, ``#`` comments; make a line with ``python -m serving.keys hash KEY``)
or as plain keys in the environment (``RECOURSE_API_KEYS=key1,key2``, hashed on load). A caller sends
``Authorization: Bearer <key>``; the server keeps only hashes and compares them in constant time.

With keys on, every route answers 401 (``WWW-Authenticate: Bearer``, a one-line ``detail``) without a
valid key, except what a browser or an orchestrator needs before it has one: the page (``GET /``,
``/static/...``, ``/schema``), the API docs (``/docs``, ``/redoc``, ``/openapi.json``; the docs'
"Authorize" button takes the key) and the probes (``/livez``, ``/readyz``, ``/health``). Each key has
a token bucket of ``rate`` requests a second (``burst`` at once); past it, 429 with ``Retry-After``.

Keys are off by default, which is right on loopback (the default ``--host 127.0.0.1``); turn them on
before binding to any other interface (``serve.py`` warns when it is not).
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import math
import os
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse

ENV = "RECOURSE_API_KEYS"
OPEN_PATHS = ("/", "/schema", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json", "/livez", "/readyz",
              "/health", "/favicon.ico")
OPEN_PREFIXES = ("/static/",)


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


class KeyStore:
    """The accepted keys, as SHA-256 hashes, each with a name (for logs and limits; never the key)."""

    def __init__(self, hashes: dict[str, str]):
        bad = [n for n, h in hashes.items() if len(h) != 64 or any(c not in "0123456789abcdef" for c in h)]
        if bad:
            raise ValueError(f"api keys: {bad[0]!r} is not a SHA-256 hex digest (python -m serving.keys hash KEY)")
        if not hashes:
            raise ValueError("api keys: no key given")
        self.hashes = dict(hashes)

    @classmethod
    def from_file(cls, path: str | Path) -> KeyStore:
        """``NAME:HEX`` or ``HEX`` per line; blank lines and ``#`` comments skipped."""
        p = Path(path)
        if not p.exists():
            raise FileNotFoundError(f"--api-keys: {p} does not exist")
        out: dict[str, str] = {}
        for i, line in enumerate(p.read_text().splitlines(), 1):
            line = line.split("#", 1)[0].strip()
            if line:
                name, _, digest = line.rpartition(":")
                out[name or f"key{i}"] = digest.strip().lower()
        return cls(out)

    @classmethod
    def from_keys(cls, keys: Iterable[str]) -> KeyStore:
        return cls({f"env{i}": key_hash(k) for i, k in enumerate(k.strip() for k in keys if k.strip())})

    @classmethod
    def configured(cls, path: str | None) -> KeyStore | None:
        """The file's keys, else the environment's, else None (keys off)."""
        if path:
            return cls.from_file(path)
        env = os.environ.get(ENV, "")
        return cls.from_keys(env.split(",")) if env.strip() else None

    def name_of(self, key: str) -> str | None:
        h = key_hash(key)
        found = None
        for name, digest in self.hashes.items():  # every hash compared: the time says nothing of which matched
            if hmac.compare_digest(h, digest):
                found = name
        return found


class RateLimiter:
    """A token bucket per key name: ``rate`` requests a second, ``burst`` at once."""

    def __init__(self, rate: float, burst: float | None = None):
        self.rate, self.burst = rate, burst if burst is not None else max(1.0, 2 * rate)
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, name: str) -> float:
        """0 if the request may go now, else the seconds until it may."""
        now = time.monotonic()
        with self._lock:
            tokens, t = self._buckets.get(name, (self.burst, now))
            tokens = min(self.burst, tokens + (now - t) * self.rate)
            if tokens >= 1.0:
                self._buckets[name] = (tokens - 1.0, now)
                return 0.0
            self._buckets[name] = (tokens, now)
            return (1.0 - tokens) / self.rate


class _KeyGuard:
    """ASGI middleware: 401 without a valid bearer key, 429 past the key's rate (open paths exempt)."""

    def __init__(self, app: Any, keys: KeyStore, limiter: RateLimiter | None):
        self.app, self.keys, self.limiter = app, keys, limiter

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            await self.app(scope, receive, send)
            return
        auth = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
        scheme, _, key = auth.partition(" ")
        name = self.keys.name_of(key.strip()) if scheme.lower() == "bearer" and key.strip() else None
        if name is None:
            detail = ("authorization: this server needs an API key: send 'Authorization: Bearer <key>'" if not auth
                      else "authorization: the key is not valid (send 'Authorization: Bearer <key>')")
            await JSONResponse({"detail": detail}, status_code=401,
                               headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)
            return
        wait = self.limiter.take(name) if self.limiter is not None else 0.0
        if wait > 0:
            await JSONResponse({"detail": f"rate: more than {self.limiter.rate:g} requests a second for this key; "
                                          f"retry in {wait:.2f} s"}, status_code=429,
                               headers={"Retry-After": str(max(1, math.ceil(wait)))})(scope, receive, send)
            return
        scope.setdefault("state", {})["api_key"] = name
        await self.app(scope, receive, send)


def protect(app: FastAPI, keys: KeyStore, *, rate: float = 50.0, burst: float | None = None) -> None:
    """Require a key on ``app`` (see the module); ``rate``: requests a second per key (0: no limit).
    The OpenAPI schema declares the bearer scheme, so ``/docs``'s "Authorize" button takes the key."""
    app.add_middleware(_KeyGuard, keys=keys, limiter=RateLimiter(rate, burst) if rate > 0 else None)
    limited = rate > 0
    default_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = default_openapi()
            schema.setdefault("components", {}).setdefault("securitySchemes", {})["bearer"] = {
                "type": "http", "scheme": "bearer", "description": "an API key of this server"}
            schema["security"] = [{"bearer": []}]
            error = {"$ref": "#/components/schemas/ErrorResponse"} if "ErrorResponse" in schema.get(
                "components", {}).get("schemas", {}) else {"type": "object"}
            for path, ops in schema.get("paths", {}).items():
                for op in ops.values():
                    if path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
                        op["security"] = []  # open: the page, the docs and the probes
                        continue
                    op.setdefault("responses", {})
                    op["responses"].setdefault("401", {"description": "no valid API key (WWW-Authenticate: Bearer)",
                                                       "content": {"application/json": {"schema": error}}})
                    if limited:
                        op["responses"].setdefault("429", {"description": "past the key's request rate (Retry-After)",
                                                           "content": {"application/json": {"schema": error}}})
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="API keys for serve.py --api-keys FILE: print a key's file line.")
    sub = p.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("hash", help="the SHA-256 line of a key (NAME:HEX)")
    h.add_argument("key")
    h.add_argument("--name", default="", help="a name for logs and limits (default: none)")
    args = p.parse_args(argv)
    print(f"{args.name + ':' if args.name else ''}{key_hash(args.key)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
