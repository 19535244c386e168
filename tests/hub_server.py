"""A stand-in for the Hugging Face Hub: a real HTTP server on 127.0.0.1 speaking the Hub's protocol.

The real Hub cannot be reached from the test machines, so the hub tests point huggingface_hub (and
datasets) at this server (`HF_ENDPOINT` / `endpoint=`) and let the real clients do everything they
do against huggingface.co. It speaks what huggingface_hub 2.4 (snapshot_download, hf_hub_download,
repo_info, list_repo_tree, get_paths_info, create_repo, create_branch, create_commit with the
legacy LFS upload — never Xet) and datasets 5.2's load_dataset use, with the Hub's own status
codes, headers and messages. Model repos live in `repos`, dataset repos in `datasets` (URLs with
`/datasets/` and `/api/datasets/`).

The protocol lives in one module each: tests/hub_download.py (info, tree, paths-info, refs,
resolve, CDN), tests/hub_upload.py (create, branch, preupload, LFS batch/storage/verify, commit),
tests/hub_metadata.py (validate-yaml), tests/hub_repos.py (repos, commits, LFS rules); this
module holds the server, its routing and auth, its responses and the test hooks.

Errors follow the Hub: unknown repo — or a private one asked without a token — 401
`X-Error-Code: RepoNotFound`; unknown revision 404 `RevisionNotFound`; missing file 404
`EntryNotFound`; a gated repo's files without a token 401 `GatedRepo`, with a token that has no
access 403 `GatedRepo` (its model info stays public).

Test hooks: `cut(path, after_bytes, times)` closes a download mid-body (the client resumes with
`Range`); `fail(path, status, times)` answers a file's download (GET) with an error; `log` records
every request as a Hit (method, kind, repo, path, range, status, authorized — never the token;
kinds info tree paths-info refs resolve cdn create branch validate preupload lfs-batch upload verify
commit); `count(path)` counts the downloads of one file; `transferred()`. For uploads, objects are
named by their sha256 or their bytes: `fail_upload(obj, status, times)` answers its PUT with an
error (403 is not retried by the client); `cut_upload(obj, after_bytes, times)` reads part of the
body and drops the connection (the client retries); `hold_upload(obj)` → Hold: the PUT waits until
`release()` (`reached` is set when it arrives, so a test can kill the uploader meanwhile);
`uploads(obj)` counts the PUTs that stored it. `files(repo_id, branch, type)` and
`history(repo_id, branch, type)` read what arrived.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

from hub_download import DownloadRoutes
from hub_metadata import MetadataRoutes, validate_metadata  # noqa: F401  (tests import it here)
from hub_repos import Commit, Repo
from hub_upload import UploadRoutes

KINDS = {None: "info", "revision": "info", "tree": "tree", "paths-info": "paths-info",
         "refs": "refs", "preupload": "preupload", "commit": "commit", "branch": "branch"}
WRITES = {"preupload", "commit", "branch", "create", "lfs-batch", "verify"}


@dataclass
class Hit:
    method: str
    kind: str            # see the module docstring
    repo: str | None
    path: str | None     # a file's path; for upload/verify the object's sha256
    range: str | None
    status: int
    authorized: bool     # a Bearer token came with the request (the token itself is not kept)
    rev: str | None = None


@dataclass
class Hold:
    reached: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)

    def release(self) -> None:
        self.released.set()


def _oid(obj: str | bytes) -> str:
    return hashlib.sha256(obj).hexdigest() if isinstance(obj, bytes) else obj


@dataclass
class HubServer:
    repos: dict[str, Repo]                      # model repos by id
    log: list[Hit] = field(default_factory=list)
    datasets: dict[str, Repo] = field(default_factory=dict)
    write_tokens: tuple[str, ...] | None = None  # None: any token may write

    def __post_init__(self):
        for repo in self.datasets.values():
            repo.type = "dataset"
        # the hooks' tables and the LFS store are the handler's too (tests/hub_download.py,
        # tests/hub_upload.py), hence public
        self.download_cuts: dict[str, list[int]] = {}   # path -> [after_bytes, times left]
        self.download_fails: dict[str, list[int]] = {}  # path -> [status, times left]
        self.upload_fails: dict[str, list[int]] = {}
        self.upload_cuts: dict[str, list[int]] = {}
        self.holds: dict[str, Hold] = {}
        self.objects: dict[str, bytes] = {}        # the LFS store, by sha256
        for repo in [*self.repos.values(), *self.datasets.values()]:
            for data in repo.files.values():
                self.objects[hashlib.sha256(data).hexdigest()] = data
        self._secret = b"stand-in-cdn"
        self.lock = threading.Lock()
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
        for hold in self.holds.values():
            hold.release()
        self._httpd.shutdown()
        self._httpd.server_close()

    # test hooks: downloads --------------------------------------------------------------------
    def cut(self, path: str, after_bytes: int, times: int = 1) -> None:
        self.download_cuts[path] = [after_bytes, times]

    def fail(self, path: str, status: int = 500, times: int = 1) -> None:
        self.download_fails[path] = [status, times]

    def count(self, path: str, method: str = "GET") -> int:
        return sum(1 for h in self.log if h.path == path and h.method == method
                   and h.kind in ("resolve", "cdn"))

    def transferred(self) -> set[str]:
        """Files whose bytes were sent at least once (a GET answered 200 or 206)."""
        return {h.path for h in self.log if h.method == "GET" and h.kind in ("resolve", "cdn")
                and h.status in (200, 206)}

    # test hooks: uploads ----------------------------------------------------------------------
    def fail_upload(self, obj: str | bytes, status: int = 403, times: int = 1) -> None:
        self.upload_fails[_oid(obj)] = [status, times]

    def cut_upload(self, obj: str | bytes, after_bytes: int, times: int = 1) -> None:
        self.upload_cuts[_oid(obj)] = [after_bytes, times]

    def hold_upload(self, obj: str | bytes) -> Hold:
        hold = self.holds[_oid(obj)] = Hold()
        return hold

    def uploads(self, obj: str | bytes) -> int:
        """How many PUTs stored this object (sha256 or bytes)."""
        return sum(1 for h in self.log if h.kind == "upload" and h.path == _oid(obj)
                   and h.status == 200)

    def store(self, repo_type: str = "model") -> dict[str, Repo]:
        return self.datasets if repo_type == "dataset" else self.repos

    def files(self, repo_id: str, branch: str = "main", type: str = "model") -> dict[str, bytes]:
        return dict(self.store(type)[repo_id].resolve(branch).files)

    def history(self, repo_id: str, branch: str = "main", type: str = "model") -> list[Commit]:
        """The commits of a branch, newest first."""
        repo = self.store(type)[repo_id]
        out, c = [], repo.resolve(branch)
        while c is not None:
            out.append(c)
            c = repo.commits.get(c.parent) if c.parent else None
        return out

    def take(self, table: dict[str, list[int]], key: str) -> int | None:
        with self.lock:
            entry = table.get(key)
            if not entry or entry[1] <= 0:
                return None
            entry[1] -= 1
            return entry[0]

    def sign(self, sha256: str) -> str:
        return hmac.new(self._secret, sha256.encode(), "sha256").hexdigest()[:16]


class Handler(UploadRoutes, DownloadRoutes, MetadataRoutes, BaseHTTPRequestHandler):
    """One request to the stand-in: routed by protocol to the mixins' endpoints; the plumbing
    (auth, bodies, responses, the log) is here. `hub` is set per server (_handler)."""
    hub: HubServer
    protocol_version = "HTTP/1.1"     # keep-alive, as the client expects from the Hub

    def log_message(self, *args):     # quiet: the tests read hub.log instead
        pass

    def do_HEAD(self):
        self._route("HEAD")

    def do_GET(self):
        self._route("GET")

    def do_POST(self):
        self._route("POST")

    def do_PUT(self):
        self._route("PUT")

    # routing ----------------------------------------------------------------------------------
    def _route(self, method: str):
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.split("/") if p]
        query = parse_qs(url.query)
        self._consumed = False
        try:
            if parts[:1] == ["api"]:
                return self._api(method, parts[1:], query)
            if parts[:1] == ["cdn"]:
                return self._cdn(method, parts[1] if len(parts) > 1 else "", query)
            if parts[:1] == ["storage"] and len(parts) == 2:
                return self._storage(method, parts[1], query)
            rtype = "model"
            if parts[:1] == ["datasets"]:
                rtype, parts = "dataset", parts[1:]
            if len(parts) >= 5 and parts[1].endswith(".git") and method == "POST":
                return self._lfs(rtype, f"{parts[0]}/{parts[1][:-4]}", parts[2:])
            if len(parts) >= 5 and parts[2] == "resolve":
                return self._resolve(method, rtype, "/".join(parts[:2]), parts[3],
                                     "/".join(parts[4:]))
            self._error(404, None, "Not Found", self._hit(method, "other", None, url.path, 404))
            if method in ("POST", "PUT") and not self._consumed and not self.close_connection:
                self._body()     # an unread body would be taken for the next request
        except (BrokenPipeError, ConnectionResetError):   # the client went away (killed)
            self.close_connection = True

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization", "")
        return auth[7:] if auth.startswith("Bearer ") and auth[7:] else None

    def _hit(self, method, kind, repo, path, status, rev=None) -> Hit:
        return Hit(method, kind, repo, path, self.headers.get("Range"), status,
                   self._token() is not None, rev)

    def _may_write(self, hit) -> bool:
        """Write endpoints need a token (401 without), one of hub.write_tokens if set (403)."""
        token = self._token()
        if token is None:
            self._error(401, None, "Invalid username or password.", hit(401))
            return False
        if self.hub.write_tokens is not None and token not in self.hub.write_tokens:
            self._error(403, None, "You don't have the rights to write to this repository: "
                        "the token needs write access.", hit(403))
            return False
        return True

    def _repo(self, method, kind, rtype, repo_id, rev=None) -> Repo | None:
        """The repo, or answer as the Hub does for an unknown one (or a private one, asked
        without a token)."""
        repo = self.hub.store(rtype).get(repo_id)
        if repo is None or (repo.private and self._token() is None):
            self._error(401, "RepoNotFound", "Repository not found",
                        self._hit(method, kind, repo_id, None, 401, rev))
            return None
        return repo

    def _commit_of(self, repo, rev, hit) -> Commit | None:
        c = repo.resolve(rev)
        if c is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}", hit(404))
        return c

    def _body(self) -> bytes:
        self._consumed = True
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _json_body(self):
        try:
            return json.loads(self._body() or b"{}")
        except ValueError:
            return {}

    # /api/...: each endpoint to its protocol's module ---------------------------------------
    def _api(self, method, parts, query):
        if parts == ["repos", "create"] and method == "POST":
            return self._create()
        if parts == ["validate-yaml"] and method == "POST":
            return self._validate()
        if parts[:1] not in (["models"], ["datasets"]) or len(parts) < 3:
            return self._error(404, None, "Not Found",
                               self._hit(method, "other", None, "/".join(parts), 404))
        rtype, repo_id, rest = parts[0][:-1], "/".join(parts[1:3]), parts[3:]
        kind = KINDS.get(rest[0] if rest else None, "other")
        rev = rest[1] if len(rest) > 1 else "main"
        hit = lambda status: self._hit(method, kind, repo_id, None, status, rev)  # noqa: E731
        if kind in WRITES and not self._may_write(hit):
            return
        repo = self._repo(method, kind, rtype, repo_id, rev)
        if repo is None:
            return
        if kind == "refs":
            return self._refs(repo, hit)
        if kind == "branch":
            return self._branch(repo, rest[1], hit)
        if kind == "commit":
            return self._commit(repo, repo_id, rev, query, hit)
        c = self._commit_of(repo, rev, hit)
        if c is None:
            return
        if kind == "tree":
            return self._tree(repo, c, "/".join(rest[2:]), query, hit)
        if kind == "paths-info":
            return self._paths_info(repo, c, hit)
        if kind == "preupload":
            return self._preupload(c, hit)
        self._repo_info(repo, repo_id, c, query, hit)

    # responses ------------------------------------------------------------------------------
    def _json(self, obj, hit):
        self._send(hit.status, json.dumps(obj).encode(), hit,
                   {"Content-Type": "application/json; charset=utf-8"},
                   head=hit.method == "HEAD")

    def _error(self, status, code, message, hit, extra=None, body=None):
        header = " ".join(message.split()).encode("latin-1", "replace").decode("latin-1")
        headers = {"X-Error-Message": header, **(extra or {})}
        if code:
            headers["X-Error-Code"] = code
        self._send(status, json.dumps({"error": message, **(body or {})}).encode(), hit,
                   {"Content-Type": "application/json; charset=utf-8", **headers},
                   head=hit.method == "HEAD")

    def _send(self, status, body: bytes, hit, headers=None, head=False):
        self.hub.log.append(hit)
        self.send_response(status)
        headers = {"Content-Type": "application/octet-stream", **(headers or {})}
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head and body:
            self.wfile.write(body)


def _handler(hub: HubServer) -> type[Handler]:
    return type("Handler", (Handler,), {"hub": hub})


# --- client-side helpers the download tests share -------------------------------------------
def offline(monkeypatch) -> None:
    """HF_HUB_OFFLINE=1 for mens (it reads the environment now) and for huggingface_hub (which
    read it once, at import)."""
    import huggingface_hub.constants as C
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(C, "HF_HUB_OFFLINE", True)


def files_in(snapshot) -> set[str]:
    """The files under a downloaded snapshot, as relative paths."""
    from pathlib import Path
    snapshot = Path(snapshot)
    return {str(p.relative_to(snapshot)) for p in snapshot.rglob("*") if p.is_file()}
