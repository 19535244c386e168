"""A stand-in for the Hugging Face Hub: a real HTTP server on 127.0.0.1 speaking the Hub's protocol.

The real Hub cannot be reached from the test machines, so the download tests point huggingface_hub
at this server (`HF_ENDPOINT` / `endpoint=`) and let the real client do everything it does against
huggingface.co. It speaks what huggingface_hub 2.4's snapshot_download, hf_hub_download and
model_info use, with the Hub's own status codes, headers and messages:

    GET  /api/models/{repo}[/revision/{rev}]        model info: sha, siblings, gated
    GET  /api/models/{repo}/tree/{rev}[?recursive]   tree listing: oid, size, lfs {oid, size}
    HEAD|GET /{repo}/resolve/{rev}/{path}            X-Repo-Commit, ETag, Content-Length; LFS files
                                                     answer 302 to a CDN URL with X-Linked-Etag
                                                     (sha256) and X-Linked-Size, as the Hub does
    GET  /cdn/{sha256}?sig=…                         the "CDN": bytes, Range → 206

The CDN URL names the host `localhost` while the API is on `127.0.0.1`: for the client they are
different origins, so (as with the real CDN) it does not follow the HEAD redirect, takes the
metadata from the 302 and drops the Authorization header for the GET. Xet is never advertised (no
`xetHash` in the tree, no X-Xet-Hash header), so the client uses plain HTTP and Range requests.

Errors follow the Hub: unknown repo 401 `X-Error-Code: RepoNotFound`; unknown revision 404
`RevisionNotFound`; missing file 404 `EntryNotFound`; a gated repo's files without a token 401
`GatedRepo`, with a token that has no access 403 `GatedRepo` (its model info stays public).

Test hooks: `cut(path, after_bytes, times)` closes the connection mid-body (the client sees a
RemoteProtocolError and resumes with `Range`); `fail(path, status, times)` answers a file's
transfer (GET) with an error; `log` records every request (method, repo, path, range, whether
a token came — never the token); `count(path)` counts the transfers (GET) of one file, through
resolve or the CDN.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pth", ".pt", ".onnx", ".model")


@dataclass
class Repo:
    files: dict[str, bytes]
    sha: str = ""                   # the commit of `main` (40 hex); derived from the files if empty
    gated: bool = False
    tokens: tuple[str, ...] = ()    # bearer tokens that were granted access (gated repos)

    def __post_init__(self):
        if not self.sha:
            h = hashlib.sha1()
            for name in sorted(self.files):
                h.update(name.encode() + b"\0" + hashlib.sha256(self.files[name]).digest())
            self.sha = h.hexdigest()


def git_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def is_lfs(path: str) -> bool:
    return path.endswith(LFS_SUFFIXES)


def lfs_pointer(data: bytes) -> bytes:
    return (f"version https://git-lfs.github.com/spec/v1\noid sha256:"
            f"{hashlib.sha256(data).hexdigest()}\nsize {len(data)}\n").encode()


@dataclass
class Hit:
    method: str
    kind: str            # "info" | "tree" | "resolve" | "cdn"
    repo: str | None
    path: str | None
    range: str | None
    status: int
    authorized: bool     # a Bearer token came with the request (the token itself is not kept)


@dataclass
class HubServer:
    repos: dict[str, Repo]
    log: list[Hit] = field(default_factory=list)

    def __post_init__(self):
        self._cuts: dict[str, list[int]] = {}      # path -> [after_bytes, times left]
        self._fails: dict[str, list[int]] = {}     # path -> [status, times left]
        self._secret = b"stand-in-cdn"
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,),
                                        daemon=True)

    # lifecycle --------------------------------------------------------------------------------
    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._httpd.shutdown()
        self._httpd.server_close()

    # test hooks -------------------------------------------------------------------------------
    def cut(self, path: str, after_bytes: int, times: int = 1) -> None:
        self._cuts[path] = [after_bytes, times]

    def fail(self, path: str, status: int = 500, times: int = 1) -> None:
        self._fails[path] = [status, times]

    def count(self, path: str, method: str = "GET") -> int:
        return sum(1 for h in self.log if h.path == path and h.method == method
                   and h.kind in ("resolve", "cdn"))

    def transferred(self) -> set[str]:
        """Files whose bytes were sent at least once (a GET answered 200 or 206)."""
        return {h.path for h in self.log if h.method == "GET" and h.kind in ("resolve", "cdn")
                and h.status in (200, 206)}

    def _take(self, table: dict[str, list[int]], path: str) -> int | None:
        with self._lock:
            entry = table.get(path)
            if not entry or entry[1] <= 0:
                return None
            entry[1] -= 1
            return entry[0]

    def _sig(self, sha256: str) -> str:
        return hmac.new(self._secret, sha256.encode(), "sha256").hexdigest()[:16]


def _handler(hub: HubServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"     # keep-alive, as the client expects from the Hub

        def log_message(self, *args):     # quiet: the tests read hub.log instead
            pass

        def do_HEAD(self):
            self._route("HEAD")

        def do_GET(self):
            self._route("GET")

        # routing ------------------------------------------------------------------------------
        def _route(self, method: str):
            url = urlsplit(self.path)
            parts = [unquote(p) for p in url.path.split("/") if p]
            if parts[:2] == ["api", "models"]:
                return self._api(method, parts[2:], parse_qs(url.query))
            if parts and parts[0] == "cdn":
                return self._cdn(method, parts[1] if len(parts) > 1 else "", parse_qs(url.query))
            if len(parts) >= 5 and parts[2] == "resolve":
                return self._resolve(method, "/".join(parts[:2]), parts[3], "/".join(parts[4:]))
            self._send(404, b"Not Found", hit=Hit(method, "other", None, url.path, None, 404,
                                                   False))

        def _token(self) -> str | None:
            auth = self.headers.get("Authorization", "")
            return auth[7:] if auth.startswith("Bearer ") else None

        def _hit(self, method, kind, repo, path, status) -> Hit:
            return Hit(method, kind, repo, path, self.headers.get("Range"), status,
                       self._token() is not None)

        def _repo(self, method, kind, parts) -> tuple[str, Repo] | None:
            """The repo named by parts[0:2], or answer as the Hub does for an unknown one."""
            repo_id = "/".join(parts[:2])
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._error(401, "RepoNotFound", "Repository not found",
                            self._hit(method, kind, repo_id, None, 401))
                return None
            return repo_id, repo

        def _rev_ok(self, repo: Repo, rev: str) -> bool:
            return rev in ("main", repo.sha)

        # /api/models/... -------------------------------------------------------------------------
        def _api(self, method, parts, query):
            found = self._repo(method, "info", parts)
            if found is None:
                return
            repo_id, repo = found
            rest = parts[2:]
            if rest[:1] == ["tree"]:
                rev = rest[1] if len(rest) > 1 else "main"
                if not self._rev_ok(repo, rev):
                    return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}",
                                       self._hit(method, "tree", repo_id, None, 404))
                return self._json(_tree(repo), self._hit(method, "tree", repo_id, None, 200))
            rev = rest[1] if rest[:1] == ["revision"] and len(rest) > 1 else "main"
            if not self._rev_ok(repo, rev):
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}",
                                   self._hit(method, "info", repo_id, None, 404))
            info = {"_id": repo.sha[:24], "id": repo_id, "modelId": repo_id,
                    "author": repo_id.split("/")[0], "sha": repo.sha, "private": False,
                    "gated": "manual" if repo.gated else False, "disabled": False,
                    "downloads": 0, "likes": 0, "tags": [], "library_name": "transformers",
                    "lastModified": "2026-11-30T00:00:00.000Z",
                    "siblings": [{"rfilename": p} for p in sorted(repo.files)]}
            self._json(info, self._hit(method, "info", repo_id, None, 200))

        # /{repo}/resolve/{rev}/{path} ------------------------------------------------------------
        def _resolve(self, method, repo_id, rev, path):
            found = self._repo(method, "resolve", repo_id.split("/"))
            if found is None:
                return
            _, repo = found
            hit = lambda status: self._hit(method, "resolve", repo_id, path, status)  # noqa: E731
            if repo.gated:
                token = self._token()
                if token is None:
                    return self._error(401, "GatedRepo",
                                       f"Access to model {repo_id} is restricted. You must have "
                                       f"access to it and be authenticated to access it. Please "
                                       f"log in.", hit(401))
                if token not in repo.tokens:
                    return self._error(403, "GatedRepo",
                                       f"Access to model {repo_id} is restricted and you are not "
                                       f"in the authorized list. Visit {hub.url}/{repo_id} to "
                                       f"ask for access.", hit(403))
            if not self._rev_ok(repo, rev):
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}", hit(404))
            data = repo.files.get(path)
            if data is None:
                return self._error(404, "EntryNotFound", "Entry not found", hit(404),
                                   {"X-Repo-Commit": repo.sha})
            common = {"X-Repo-Commit": repo.sha, "Accept-Ranges": "bytes"}
            if is_lfs(path):
                sha256 = hashlib.sha256(data).hexdigest()
                # another origin than the API, as the Hub's CDN is: see the module docstring
                location = f"http://localhost:{hub.port}/cdn/{sha256}?sig={hub._sig(sha256)}" \
                           f"&name={quote(path)}"
                return self._send(302, b"", hit(302), {
                    **common, "Location": location, "ETag": f'"{git_oid(lfs_pointer(data))}"',
                    "X-Linked-Etag": f'"{sha256}"', "X-Linked-Size": str(len(data))})
            self._bytes(method, path, data, hit, {**common, "ETag": f'"{git_oid(data)}"'})

        # /cdn/{sha256} --------------------------------------------------------------------------
        def _cdn(self, method, sha256, query):
            name = query.get("name", [None])[0]
            hit = lambda status: self._hit(method, "cdn", None, name, status)  # noqa: E731
            if query.get("sig", [""])[0] != hub._sig(sha256):
                return self._send(403, b"AccessDenied", hit(403))
            for repo in hub.repos.values():
                for data in repo.files.values():
                    if hashlib.sha256(data).hexdigest() == sha256:
                        return self._bytes(method, name, data, hit, {"ETag": f'"{sha256}"',
                                                                     "Accept-Ranges": "bytes"})
            self._send(404, b"NoSuchKey", hit(404))

        # responses ------------------------------------------------------------------------------
        def _bytes(self, method, path, data: bytes, hit, headers):
            """200 with the whole file, or 206 for `Range: bytes=a-[b]`; may be cut (hub.cut)."""
            failed = hub._take(hub._fails, path) if method == "GET" else None
            if failed is not None:
                return self._error(failed, None, "Internal Error", hit(failed))
            start, end, status = 0, len(data) - 1, 200
            rng = self.headers.get("Range")
            if rng and rng.startswith("bytes="):
                a, _, b = rng[6:].partition("-")
                start, end = int(a or 0), int(b) if b else len(data) - 1
                if start >= len(data):
                    return self._send(416, b"", hit(416),
                                      {"Content-Range": f"bytes */{len(data)}"})
                status = 206
                headers = {**headers, "Content-Range": f"bytes {start}-{end}/{len(data)}"}
            body = data[start:end + 1]
            cut = hub._take(hub._cuts, path) if method == "GET" else None
            if cut is None:
                return self._send(status, body, hit(status), headers, head=method == "HEAD")
            # Announce the whole body, send part of it, then drop the connection.
            hub.log.append(hit(status))
            self.send_response(status)
            for k, v in {**headers, "Content-Length": str(len(body)),
                         "Content-Type": "application/octet-stream"}.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.close_connection = True

        def _json(self, obj, hit):
            self._send(hit.status, json.dumps(obj).encode(), hit,
                       {"Content-Type": "application/json; charset=utf-8"})

        def _error(self, status, code, message, hit, extra=None):
            headers = {"X-Error-Message": message, **(extra or {})}
            if code:
                headers["X-Error-Code"] = code
            self._send(status, json.dumps({"error": message}).encode(), hit,
                       {"Content-Type": "application/json; charset=utf-8", **headers},
                       head=hit.method == "HEAD")

        def _send(self, status, body: bytes, hit, headers=None, head=False):
            hub.log.append(hit)
            self.send_response(status)
            headers = {"Content-Type": "application/octet-stream", **(headers or {})}
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head and body:
                self.wfile.write(body)

    return Handler


def _tree(repo: Repo) -> list[dict]:
    """The recursive tree listing: folders, then files with their git oid and LFS pointer info."""
    entries: list[dict] = []
    folders = sorted({"/".join(p.split("/")[:i]) for p in repo.files
                      for i in range(1, p.count("/") + 1)})
    for d in folders:
        entries.append({"type": "directory", "oid": git_oid(d.encode()), "size": 0, "path": d})
    for path in sorted(repo.files):
        data = repo.files[path]
        if is_lfs(path):
            pointer = lfs_pointer(data)
            entries.append({"type": "file", "oid": git_oid(pointer), "size": len(data),
                            "path": path, "lfs": {"oid": hashlib.sha256(data).hexdigest(),
                                                  "size": len(data),
                                                  "pointerSize": len(pointer)}})
        else:
            entries.append({"type": "file", "oid": git_oid(data), "size": len(data),
                            "path": path})
    return entries
