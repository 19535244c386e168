"""The stand-in Hub's read side (tests/hub_server.py): repo info, trees, paths-info, refs, file
resolve and the "CDN" that serves LFS files, with Range and the download test hooks.

  download
    GET  /api/{models|datasets}/{repo}[/revision/{rev}]   info: sha, siblings (?blobs), cardData
    GET  /api/{t}s/{repo}/tree/{rev}[/{path}]?recursive&expand   entries: oid, size, lfs, lastCommit
    POST /api/{t}s/{repo}/paths-info/{rev}      (form: paths, expand) the same for named paths
    GET  /api/{t}s/{repo}/refs                  branches (converts/tags: none)
    HEAD|GET [/datasets]/{repo}/resolve/{rev}/{path}   X-Repo-Commit, ETag, Content-Length; LFS
                    files answer 302 to a CDN URL with X-Linked-Etag (sha256) and X-Linked-Size
    GET  /cdn/{sha256}?sig=…                    the "CDN": bytes, Range → 206

The CDN URLs name the host `localhost` while the API is on `127.0.0.1`: for the client they are
another origin, so (as with the real CDN) it does not follow the HEAD redirect, takes the
metadata from the 302 and sends no Authorization header there (the upload's storage URLs do
the same).
"""
from __future__ import annotations

import hashlib
from urllib.parse import parse_qs, quote

from hub_repos import DATE, Commit, Repo, git_oid, is_lfs, lfs_pointer


class DownloadRoutes:
    """The handler's read endpoints (mixed into tests/hub_server.py's handler, whose `hub` is
    the HubServer)."""

    def _paths_info(self, repo, c, hit):
        form = parse_qs(self._body().decode())
        expand = form.get("expand", ["false"])[0].lower() in ("1", "true")
        paths = [p.strip("/") for p in form.get("paths", [])]
        return self._json([_entry(repo, c, p, expand) for p in paths
                           if p in c.files or _is_dir(c, p)], hit(200))

    def _refs(self, repo, hit):
        return self._json({"branches": [{"name": b, "ref": f"refs/heads/{b}",
                                         "targetCommit": sha}
                                        for b, sha in repo.branches.items()],
                           "converts": [], "tags": [], "pullRequests": []}, hit(200))

    def _repo_info(self, repo, repo_id, c, query, hit):
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
                                   f"in the authorized list. Visit {self.hub.url}/{repo_id} to "
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
            location = f"http://localhost:{self.hub.port}/cdn/{sha256}?sig={self.hub.sign(sha256)}" \
                       f"&name={quote(path)}"
            return self._send(302, b"", hit(302), {
                **common, "Location": location, "ETag": f'"{git_oid(lfs_pointer(data))}"',
                "X-Linked-Etag": f'"{sha256}"', "X-Linked-Size": str(len(data))},
                head=method == "HEAD")
        self._bytes(method, path, data, hit, {**common, "ETag": f'"{git_oid(data)}"'})

    def _cdn(self, method, sha256, query):
        name = query.get("name", [None])[0]
        hit = lambda status: self._hit(method, "cdn", None, name, status)  # noqa: E731
        if query.get("sig", [""])[0] != self.hub.sign(sha256):
            return self._send(403, b"AccessDenied", hit(403))
        data = self.hub.objects.get(sha256) or next(   # a repo a test added after the start
            (d for r in (*self.hub.repos.values(), *self.hub.datasets.values())
             for c in r.commits.values() for d in c.files.values()
             if hashlib.sha256(d).hexdigest() == sha256), None)
        if data is None:
            return self._send(404, b"NoSuchKey", hit(404))
        self._bytes(method, name, data, hit, {"ETag": f'"{sha256}"', "Accept-Ranges": "bytes"})

    def _bytes(self, method, path, data: bytes, hit, headers):
        """200 with the whole file, or 206 for `Range: bytes=a-[b]`; may be cut (self.hub.cut)."""
        failed = self.hub.take(self.hub.download_fails, path) if method == "GET" else None
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
        cut = self.hub.take(self.hub.download_cuts, path) if method == "GET" else None
        if cut is None:
            return self._send(status, body, hit(status), headers, head=method == "HEAD")
        # Announce the whole body, send part of it, then drop the connection.
        self.hub.log.append(hit(status))
        self.send_response(status)
        for k, v in {**headers, "Content-Length": str(len(body)),
                     "Content-Type": "application/octet-stream"}.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body[:cut])
        self.wfile.flush()
        self.close_connection = True


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
