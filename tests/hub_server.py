"""A stand-in for the Hugging Face Hub: a real HTTP server on 127.0.0.1 speaking the Hub's protocol.

The real Hub cannot be reached from the test machines, so the hub tests point huggingface_hub (and
datasets) at this server (`HF_ENDPOINT` / `endpoint=`) and let the real clients do everything they
do against huggingface.co. It speaks what huggingface_hub 2.4 (snapshot_download, hf_hub_download,
repo_info, list_repo_tree, get_paths_info, create_repo, create_branch, create_commit with the
legacy LFS upload — never Xet) and datasets 5.2's load_dataset use, with the Hub's own status
codes, headers and messages. Model repos live in `repos`, dataset repos in `datasets` (URLs with
`/datasets/` and `/api/datasets/`):

  download
    GET  /api/{models|datasets}/{repo}[/revision/{rev}]   info: sha, siblings (?blobs), cardData
    GET  /api/{t}s/{repo}/tree/{rev}[/{path}]?recursive&expand   entries: oid, size, lfs, lastCommit
    POST /api/{t}s/{repo}/paths-info/{rev}      (form: paths, expand) the same for named paths
    GET  /api/{t}s/{repo}/refs                  branches (converts/tags: none)
    HEAD|GET [/datasets]/{repo}/resolve/{rev}/{path}   X-Repo-Commit, ETag, Content-Length; LFS
                    files answer 302 to a CDN URL with X-Linked-Etag (sha256) and X-Linked-Size
    GET  /cdn/{sha256}?sig=…                    the "CDN": bytes, Range → 206
  upload (write endpoints need `Authorization: Bearer <token>`: 401 without, 403 for a token not
  in `write_tokens` when that is set)
    POST /api/repos/create                      {name, organization, type, visibility|private};
                    409 when it exists; a new repo holds one commit (.gitattributes), as on the Hub
    POST /api/{t}s/{repo}/branch/{branch}       {startingPoint}: 409 when it exists
    POST /api/validate-yaml                     {content, repoType} → 200 {errors: [], warnings}
                    or 400 {errors: [{message}]}
    POST /api/{t}s/{repo}/preupload/{rev}       uploadMode lfs|regular, shouldIgnore, oid of the
                    file on that revision (sha256 for LFS, else git blob sha1: unchanged → skipped)
    POST [/datasets]/{repo}.git/info/lfs/objects/batch   objects already stored get no actions
                    (the client skips them); others an upload href (+ verify) on the storage
    PUT  /storage/{sha256}?sig=…                the bytes; sha256 and size are checked
    POST [/datasets]/{repo}.git/info/lfs/objects/verify
    POST /api/{t}s/{repo}/commit/{branch}       ndjson: header, file (base64), lfsFile (refused
                    unless its object was uploaded), deletedFile, deletedFolder → a new commit on
                    that branch only → {commitUrl, commitOid, pullRequestUrl}

Revisions are branch names or full commit shas; every commit gets a new sha on its branch. A file
is LFS when its name has an LFS suffix or it is larger than 10 MB (everywhere: preupload, tree,
resolve). The CDN and storage URLs name the host `localhost` while the API is on `127.0.0.1`: for
the client they are other origins, so (as with the real CDN) it does not follow the HEAD redirect,
takes the metadata from the 302 and sends no Authorization header there.

Errors follow the Hub: unknown repo — or a private one asked without a token — 401
`X-Error-Code: RepoNotFound`; unknown revision 404 `RevisionNotFound`; missing file 404
`EntryNotFound`; a gated repo's files without a token 401 `GatedRepo`, with a token that has no
access 403 `GatedRepo` (its model info stays public).

validate-yaml is this stand-in's SUBSET of the Hub's metadata validation, the parts mens writes:
the front matter must be a YAML mapping; `model-index` must parse with huggingface_hub's own
`model_index_to_eval_results`; `license` a Hub licence id (LICENSES) or a list of them, and
`other` needs `license_name` and `license_link`; `base_model` a string or a list of strings. No
front matter → 200 with the Hub's "Empty or missing yaml metadata" warning.

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

import base64
import hashlib
import hmac
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pth", ".pt", ".onnx", ".model", ".parquet")
LFS_MIN_SIZE = 10 * 1024 * 1024          # the Hub stores larger files as LFS whatever their name
DATE = "2026-11-30T00:00:00.000Z"
GITATTRIBUTES = "".join(f"*{s} filter=lfs diff=lfs merge=lfs -text\n"
                        for s in LFS_SUFFIXES).encode()
LICENSES = frozenset((
    "apache-2.0 mit openrail openrail++ bigscience-openrail-m creativeml-openrail-m "
    "bigscience-bloom-rail-1.0 bigcode-openrail-m afl-3.0 artistic-2.0 bsl-1.0 bsd bsd-2-clause "
    "bsd-3-clause bsd-3-clause-clear c-uda cc cc0-1.0 cc-by-2.0 cc-by-2.5 cc-by-3.0 cc-by-4.0 "
    "cc-by-sa-3.0 cc-by-sa-4.0 cc-by-nc-2.0 cc-by-nc-3.0 cc-by-nc-4.0 cc-by-nd-4.0 "
    "cc-by-nc-nd-3.0 cc-by-nc-nd-4.0 cc-by-nc-sa-2.0 cc-by-nc-sa-3.0 cc-by-nc-sa-4.0 "
    "cdla-sharing-1.0 cdla-permissive-1.0 cdla-permissive-2.0 wtfpl ecl-2.0 epl-1.0 epl-2.0 "
    "eupl-1.1 eupl-1.2 agpl-3.0 gfdl gpl gpl-2.0 gpl-3.0 lgpl lgpl-2.1 lgpl-3.0 isc mpl-2.0 "
    "odc-by odbl osl-3.0 postgresql ofl-1.1 ncsa unlicense zlib pddl llama2 llama3 llama3.1 "
    "llama3.2 llama3.3 llama4 gemma unknown other").split())
_YAML_BLOCK = re.compile(r"^(\s*---(?:\r\n|\r|\n))([\S\s]*?)((?:\r\n|\r|\n)---[ \t]*(\r\n|\n|$))")


@dataclass
class Commit:
    sha: str
    parent: str | None
    files: dict[str, bytes]
    last: dict[str, str]          # path -> the commit that last changed it (tree's lastCommit)
    title: str
    description: str = ""


@dataclass
class Repo:
    files: dict[str, bytes] = field(default_factory=dict)   # main's files, kept in step by commits
    sha: str = ""                   # the commit of `main` (40 hex); derived from the files if empty
    gated: bool = False
    tokens: tuple[str, ...] = ()    # bearer tokens that were granted access (gated repos)
    private: bool = False           # private: asked without a token it answers as unknown
    type: str = "model"             # set by HubServer from the dict the repo is in

    def __post_init__(self):
        if not self.sha:
            h = hashlib.sha1()
            for name in sorted(self.files):
                h.update(name.encode() + b"\0" + hashlib.sha256(self.files[name]).digest())
            self.sha = h.hexdigest()
        self.branches = {"main": self.sha}
        self.commits = {self.sha: Commit(self.sha, None, self.files,
                                         dict.fromkeys(self.files, self.sha), "initial commit")}

    def resolve(self, rev: str) -> Commit | None:
        """A branch name or a full commit sha."""
        return self.commits.get(self.branches.get(rev, rev))

    def commit(self, branch: str, files: dict[str, bytes], title: str, description="") -> Commit:
        head = self.commits[self.branches[branch]]
        h = hashlib.sha1(f"{head.sha}\0{branch}\0{title}\0{len(self.commits)}".encode())
        for name in sorted(files):
            h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
        sha = h.hexdigest()
        last = {p: head.last[p] if head.files.get(p) == data else sha for p, data in files.items()}
        self.commits[sha] = Commit(sha, head.sha, files, last, title, description)
        self.branches[branch] = sha
        if branch == "main":
            self.files, self.sha = files, sha
        return self.commits[sha]


def git_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def is_lfs(path: str, data: bytes | None = None, size: int | None = None) -> bool:
    size = len(data) if data is not None else size
    return path.endswith(LFS_SUFFIXES) or (size or 0) > LFS_MIN_SIZE


def lfs_pointer(data: bytes) -> bytes:
    return (f"version https://git-lfs.github.com/spec/v1\noid sha256:"
            f"{hashlib.sha256(data).hexdigest()}\nsize {len(data)}\n").encode()


def front_matter(text: str):
    """The README's YAML metadata (None when there is none); yaml.YAMLError when it is invalid."""
    import yaml
    m = _YAML_BLOCK.match(text)
    return yaml.safe_load(m.group(2)) if m else None


def validate_metadata(text: str, repo_type: str = "model") -> tuple[list[str], list[str]]:
    """(errors, warnings) for a README, as the stand-in's /api/validate-yaml judges it."""
    import yaml
    from huggingface_hub.repocard_data import model_index_to_eval_results
    try:
        meta = front_matter(text)
    except yaml.YAMLError as e:
        return [f"Invalid YAML in README.md front matter: {' '.join(str(e).split())}"], []
    if meta is None:
        return [], ["Empty or missing yaml metadata in repo card "
                    "(https://huggingface.co/docs/hub/model-cards#model-card-metadata)"]
    if not isinstance(meta, dict):
        return ['"value" must be of type object'], []
    errors = []
    if "model-index" in meta:
        try:
            model_index_to_eval_results(meta["model-index"])
        except Exception as e:   # KeyError/TypeError/ValueError: the shapes the parser rejects
            errors.append(f'"model-index" is invalid: {type(e).__name__}: {e}')
    lic = meta.get("license")
    if lic is not None:
        lics = lic if isinstance(lic, list) else [lic]
        bad = [x for x in lics if not isinstance(x, str) or x not in LICENSES]
        if bad:
            errors.append(f'"license" must be a licence identifier of the Hub such as '
                          f'apache-2.0, mit or other, got {bad[0]!r} (see https://huggingface.co/'
                          f'docs/hub/repositories-licenses)')
        elif "other" in lics and not (meta.get("license_name") and meta.get("license_link")):
            errors.append('"license_name" and "license_link" are required when "license" is '
                          '"other"')
    base = meta.get("base_model")
    if base is not None and not (isinstance(base, str) or (
            isinstance(base, list) and all(isinstance(b, str) for b in base))):
        errors.append('"base_model" must be a string or an array of strings')
    return errors, []


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
        self._cuts: dict[str, list[int]] = {}      # path -> [after_bytes, times left]
        self._fails: dict[str, list[int]] = {}     # path -> [status, times left]
        self._upload_fails: dict[str, list[int]] = {}
        self._upload_cuts: dict[str, list[int]] = {}
        self._holds: dict[str, Hold] = {}
        self._objects: dict[str, bytes] = {}       # the LFS store, by sha256
        for repo in [*self.repos.values(), *self.datasets.values()]:
            for data in repo.files.values():
                self._objects[hashlib.sha256(data).hexdigest()] = data
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
        for hold in self._holds.values():
            hold.release()
        self._httpd.shutdown()
        self._httpd.server_close()

    # test hooks: downloads --------------------------------------------------------------------
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

    # test hooks: uploads ----------------------------------------------------------------------
    def fail_upload(self, obj: str | bytes, status: int = 403, times: int = 1) -> None:
        self._upload_fails[_oid(obj)] = [status, times]

    def cut_upload(self, obj: str | bytes, after_bytes: int, times: int = 1) -> None:
        self._upload_cuts[_oid(obj)] = [after_bytes, times]

    def hold_upload(self, obj: str | bytes) -> Hold:
        hold = self._holds[_oid(obj)] = Hold()
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

    def _take(self, table: dict[str, list[int]], key: str) -> int | None:
        with self._lock:
            entry = table.get(key)
            if not entry or entry[1] <= 0:
                return None
            entry[1] -= 1
            return entry[0]

    def _sig(self, sha256: str) -> str:
        return hmac.new(self._secret, sha256.encode(), "sha256").hexdigest()[:16]


def _handler(hub: HubServer):
    KINDS = {None: "info", "revision": "info", "tree": "tree", "paths-info": "paths-info",
             "refs": "refs", "preupload": "preupload", "commit": "commit", "branch": "branch"}
    WRITES = {"preupload", "commit", "branch", "create", "lfs-batch", "verify"}

    class Handler(BaseHTTPRequestHandler):
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

        # routing ------------------------------------------------------------------------------
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
            if hub.write_tokens is not None and token not in hub.write_tokens:
                self._error(403, None, "You don't have the rights to write to this repository: "
                            "the token needs write access.", hit(403))
                return False
            return True

        def _repo(self, method, kind, rtype, repo_id, rev=None) -> Repo | None:
            """The repo, or answer as the Hub does for an unknown one (or a private one, asked
            without a token)."""
            repo = hub.store(rtype).get(repo_id)
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

        # /api/... -------------------------------------------------------------------------------
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
                return self._json({"branches": [{"name": b, "ref": f"refs/heads/{b}",
                                                 "targetCommit": sha}
                                                for b, sha in repo.branches.items()],
                                   "converts": [], "tags": [], "pullRequests": []}, hit(200))
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
                form = parse_qs(self._body().decode())
                expand = form.get("expand", ["false"])[0].lower() in ("1", "true")
                paths = [p.strip("/") for p in form.get("paths", [])]
                return self._json([_entry(repo, c, p, expand) for p in paths
                                   if p in c.files or _is_dir(c, p)], hit(200))
            if kind == "preupload":
                return self._preupload(c, hit)
            self._json(_info(repo, repo_id, c, blobs="blobs" in query), hit(200))

        def _tree(self, repo, c, path, query, hit):
            recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
            expand = query.get("expand", ["false"])[0].lower() in ("1", "true")
            if path and not _is_dir(c, path):
                return self._error(404, "EntryNotFound", f"Entry not found: {path}", hit(404))
            prefix = f"{path}/" if path else ""
            names = sorted(_dirs(c)) + sorted(c.files)
            under = [n for n in names if n.startswith(prefix)
                     and (recursive or "/" not in n[len(prefix):])]
            self._json([_entry(repo, c, n, expand) for n in under], hit(200))

        # uploads ---------------------------------------------------------------------------------
        def _create(self):
            body = self._json_body() or {}
            rtype = body.get("type") or "model"
            repo_id = f"{body.get('organization') or 'stand-in-user'}/{body.get('name')}"
            hit = lambda status: self._hit("POST", "create", repo_id, None, status)  # noqa: E731
            if not self._may_write(hit):
                return
            prefix = "datasets/" if rtype == "dataset" else ""
            store = hub.store(rtype)
            with hub._lock:
                if repo_id in store:
                    return self._error(409, None, f"You already created this {rtype} repo",
                                       hit(409), body={"url": f"{hub.url}/{prefix}{repo_id}"})
                store[repo_id] = Repo({".gitattributes": GITATTRIBUTES}, type=rtype,
                                      private=bool(body.get("private"))
                                      or body.get("visibility") == "private")
            self._json({"url": f"{hub.url}/{prefix}{repo_id}", "name": repo_id,
                        "id": store[repo_id].sha[:24]}, hit(200))

        def _branch(self, repo, branch, hit):
            start = (self._json_body() or {}).get("startingPoint") or "main"
            if branch in repo.branches:
                return self._error(409, None, "Reference already exists", hit(409))
            c = self._commit_of(repo, start, hit)
            if c is not None:
                with hub._lock:
                    repo.branches[branch] = c.sha
                self._json({}, hit(200))

        def _validate(self):
            body = self._json_body() or {}
            hit = lambda status: self._hit("POST", "validate", None, None, status)  # noqa: E731
            errors, warnings = validate_metadata(str(body.get("content", "")),
                                                 body.get("repoType") or "model")
            out = {"errors": [{"message": m} for m in errors],
                   "warnings": [{"message": m} for m in warnings]}
            self._json(out, hit(400 if errors else 200))

        def _preupload(self, c, hit):
            files = []
            for f in (self._json_body() or {}).get("files", []):
                path, size = f["path"], int(f.get("size", 0))
                entry = {"path": path, "uploadMode": "lfs" if is_lfs(path, size=size)
                         else "regular", "shouldIgnore": False}
                if path in c.files:
                    data = c.files[path]
                    entry["oid"] = (hashlib.sha256(data).hexdigest() if is_lfs(path, data)
                                    else git_oid(data))
                files.append(entry)
            self._json({"files": files, "commitOid": c.sha}, hit(200))

        def _lfs(self, rtype, repo_id, rest):
            kind = "verify" if rest[-1:] == ["verify"] else "lfs-batch"
            hit = lambda status, oid=None: self._hit("POST", kind, repo_id, oid,  # noqa: E731
                                                     status)
            body = self._json_body()
            if not self._may_write(hit) or self._repo("POST", kind, rtype, repo_id) is None:
                return
            if kind == "verify":
                oid, size = body.get("oid"), body.get("size")
                if oid in hub._objects and len(hub._objects[oid]) == size:
                    return self._json({}, hit(200, oid))
                return self._error(404, None, "Object not found", hit(404, oid))
            objects = []
            for o in body.get("objects", []):
                oid, size = o["oid"], int(o["size"])
                entry = {"oid": oid, "size": size, "authenticated": True}
                if hub._objects.get(oid) is None or len(hub._objects[oid]) != size:
                    prefix = "datasets/" if rtype == "dataset" else ""
                    entry["actions"] = {
                        "upload": {"href": f"http://localhost:{hub.port}/storage/{oid}?sig="
                                           f"{hub._sig(oid)}&size={size}&repo={quote(repo_id)}",
                                   "expires_at": "2099-01-01T00:00:00Z"},
                        "verify": {"href": f"{hub.url}/{prefix}{repo_id}.git/info/lfs/objects/"
                                           f"verify", "header": {}}}
                objects.append(entry)
            self._send(200, json.dumps({"transfer": "basic", "objects": objects}).encode(),
                       hit(200), {"Content-Type": "application/vnd.git-lfs+json"})

        def _storage(self, method, oid, query):
            repo_id = query.get("repo", [None])[0]
            hit = lambda status: self._hit(method, "upload", repo_id, oid, status)  # noqa: E731
            if method != "PUT" or query.get("sig", [""])[0] != hub._sig(oid):
                return self._send(403, b"AccessDenied", hit(403))
            hold = hub._holds.get(oid)
            if hold is not None:
                hold.reached.set()
                hold.released.wait(60)   # the test releases it (or kills the uploader first)
            cut = hub._take(hub._upload_cuts, oid)
            if cut is not None:          # read part of the body, then drop the connection
                self._consumed = True
                self.rfile.read(cut)
                hub.log.append(hit(0))
                self.close_connection = True
                return
            data = self._body()
            failed = hub._take(hub._upload_fails, oid)
            if failed is not None:
                return self._error(failed, None, "Upload refused (stand-in hook)", hit(failed))
            size = int(query.get("size", [len(data)])[0])
            if hashlib.sha256(data).hexdigest() != oid or len(data) != size:
                return self._error(400, None, f"sha256/size mismatch for {oid}: got "
                                   f"{len(data)} bytes", hit(400))
            hub._objects[oid] = data
            self._send(200, b"", hit(200), {"ETag": f'"{oid}"'})

        def _commit(self, repo, repo_id, branch, query, hit):
            lines = [json.loads(x) for x in self._body().splitlines() if x.strip()]
            if branch not in repo.branches:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {branch}", hit(404))
            if query.get("create_pr"):
                return self._error(400, None, "The stand-in Hub does not open pull requests",
                                   hit(400))
            head = repo.resolve(branch)
            header = next((x["value"] for x in lines if x["key"] == "header"), {})
            parent = header.get("parentCommit")
            if parent and not head.sha.startswith(parent):
                return self._error(412, None, "A commit has happened since. Please refresh and "
                                   "try again.", hit(412))
            files = dict(head.files)
            for item in lines:
                key, value = item["key"], item["value"]
                path = value.get("path", "")
                if key == "file":
                    files[path] = base64.b64decode(value["content"])
                elif key == "lfsFile":
                    data = hub._objects.get(value["oid"])
                    if data is None:
                        return self._error(400, None, f"Your push was rejected because an LFS "
                                           f"pointer pointed to a file that does not exist "
                                           f"({path}: {value['oid']})", hit(400))
                    files[path] = data
                elif key == "deletedFile":
                    if files.pop(path, None) is None:
                        return self._error(404, "EntryNotFound", "A file with this name doesn't "
                                           f"exist: {path}", hit(404))
                elif key == "deletedFolder":
                    files = {p: d for p, d in files.items() if not p.startswith(path + "/")}
            if "README.md" in files and files["README.md"] != head.files.get("README.md"):
                errors, _ = validate_metadata(files["README.md"].decode("utf-8", "replace"),
                                              repo.type)
                if errors:
                    return self._error(400, None, "Invalid metadata in README.md. "
                                       + " ".join(errors), hit(400))
            with hub._lock:
                c = repo.commit(branch, files, header.get("summary", ""),
                                header.get("description", ""))
            prefix = "datasets/" if repo.type == "dataset" else ""
            self._json({"commitUrl": f"{hub.url}/{prefix}{repo_id}/commit/{c.sha}",
                        "commitOid": c.sha, "pullRequestUrl": None}, hit(200))

        # /{repo}/resolve/{rev}/{path} ------------------------------------------------------------
        def _resolve(self, method, rtype, repo_id, rev, path):
            hit = lambda status: self._hit(method, "resolve", repo_id, path, status,  # noqa: E731
                                           rev)
            repo = self._repo(method, "resolve", rtype, repo_id, rev)
            if repo is None:
                return
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
            c = self._commit_of(repo, rev, hit)
            if c is None:
                return
            data = c.files.get(path)
            if data is None:
                return self._error(404, "EntryNotFound", "Entry not found", hit(404),
                                   {"X-Repo-Commit": c.sha})
            common = {"X-Repo-Commit": c.sha, "Accept-Ranges": "bytes"}
            if is_lfs(path, data):
                sha256 = hashlib.sha256(data).hexdigest()
                # another origin than the API, as the Hub's CDN is: see the module docstring
                location = f"http://localhost:{hub.port}/cdn/{sha256}?sig={hub._sig(sha256)}" \
                           f"&name={quote(path)}"
                return self._send(302, b"", hit(302), {
                    **common, "Location": location, "ETag": f'"{git_oid(lfs_pointer(data))}"',
                    "X-Linked-Etag": f'"{sha256}"', "X-Linked-Size": str(len(data))},
                    head=method == "HEAD")
            self._bytes(method, path, data, hit, {**common, "ETag": f'"{git_oid(data)}"'})

        # /cdn/{sha256} --------------------------------------------------------------------------
        def _cdn(self, method, sha256, query):
            name = query.get("name", [None])[0]
            hit = lambda status: self._hit(method, "cdn", None, name, status)  # noqa: E731
            if query.get("sig", [""])[0] != hub._sig(sha256):
                return self._send(403, b"AccessDenied", hit(403))
            data = hub._objects.get(sha256) or next(   # a repo a test added after the start
                (d for r in (*hub.repos.values(), *hub.datasets.values())
                 for c in r.commits.values() for d in c.files.values()
                 if hashlib.sha256(d).hexdigest() == sha256), None)
            if data is None:
                return self._send(404, b"NoSuchKey", hit(404))
            self._bytes(method, name, data, hit, {"ETag": f'"{sha256}"', "Accept-Ranges": "bytes"})

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
                start, end = int(a or 0), min(int(b), len(data) - 1) if b else len(data) - 1
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


# listings -------------------------------------------------------------------------------------
def _dirs(c: Commit) -> set[str]:
    return {"/".join(p.split("/")[:i]) for p in c.files for i in range(1, p.count("/") + 1)}


def _is_dir(c: Commit, path: str) -> bool:
    return any(p.startswith(path + "/") for p in c.files)


def _entry(repo: Repo, c: Commit, path: str, expand: bool) -> dict:
    """A tree / paths-info entry: a folder, or a file with its git oid and LFS pointer info."""
    data = c.files.get(path)
    if data is None:
        entry = {"type": "directory", "oid": git_oid(f"{c.sha}/{path}".encode()), "size": 0,
                 "path": path}
        last = c.sha
    elif is_lfs(path, data):
        pointer = lfs_pointer(data)
        entry = {"type": "file", "oid": git_oid(pointer), "size": len(data), "path": path,
                 "lfs": {"oid": hashlib.sha256(data).hexdigest(), "size": len(data),
                         "pointerSize": len(pointer)}}
        last = c.last.get(path, c.sha)
    else:
        entry = {"type": "file", "oid": git_oid(data), "size": len(data), "path": path}
        last = c.last.get(path, c.sha)
    if expand:
        title = repo.commits[last].title if last in repo.commits else ""
        entry["lastCommit"] = {"id": last, "title": title, "date": DATE}
    return entry


def _info(repo: Repo, repo_id: str, c: Commit, blobs: bool) -> dict:
    siblings = []
    for path in sorted(c.files):
        s = {"rfilename": path}
        if blobs:
            e = _entry(repo, c, path, False)
            s.update(size=e["size"], blobId=e["oid"])
            if "lfs" in e:
                s["lfs"] = {"sha256": e["lfs"]["oid"], "size": e["size"],
                            "pointerSize": e["lfs"]["pointerSize"]}
        siblings.append(s)
    info = {"_id": c.sha[:24], "id": repo_id, "author": repo_id.split("/")[0], "sha": c.sha,
            "private": repo.private, "gated": "manual" if repo.gated else False,
            "disabled": False, "downloads": 0, "likes": 0, "tags": [],
            "lastModified": DATE, "createdAt": DATE, "siblings": siblings}
    try:
        meta = front_matter(c.files["README.md"].decode()) if "README.md" in c.files else None
    except Exception:   # the Hub serves the repo whatever its card holds
        meta = None
    if isinstance(meta, dict):
        info["cardData"] = meta
    if repo.type == "model":
        info.update(modelId=repo_id, library_name="transformers")
    return info


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

