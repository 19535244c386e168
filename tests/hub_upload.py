"""The stand-in Hub's write side (tests/hub_server.py), git- and Xet-free: repo and branch
creation, preupload, the legacy LFS batch/storage/verify upload, and the ndjson commit.

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
"""
from __future__ import annotations

import base64
import hashlib
import json
from urllib.parse import quote

from hub_metadata import validate_metadata
from hub_repos import GITATTRIBUTES, Repo, git_oid, is_lfs


class UploadRoutes:
    """The handler's write endpoints (mixed into tests/hub_server.py's handler, whose `hub` is
    the HubServer); each checks the token through the handler's _may_write."""

    def _create(self):
        body = self._json_body() or {}
        rtype = body.get("type") or "model"
        repo_id = f"{body.get('organization') or 'stand-in-user'}/{body.get('name')}"
        hit = lambda status: self._hit("POST", "create", repo_id, None, status)  # noqa: E731
        if not self._may_write(hit):
            return
        prefix = "datasets/" if rtype == "dataset" else ""
        store = self.hub.store(rtype)
        with self.hub.lock:
            if repo_id in store:
                return self._error(409, None, f"You already created this {rtype} repo",
                                   hit(409), body={"url": f"{self.hub.url}/{prefix}{repo_id}"})
            store[repo_id] = Repo({".gitattributes": GITATTRIBUTES}, type=rtype,
                                  private=bool(body.get("private"))
                                  or body.get("visibility") == "private")
        self._json({"url": f"{self.hub.url}/{prefix}{repo_id}", "name": repo_id,
                    "id": store[repo_id].sha[:24]}, hit(200))

    def _branch(self, repo, branch, hit):
        start = (self._json_body() or {}).get("startingPoint") or "main"
        if branch in repo.branches:
            return self._error(409, None, "Reference already exists", hit(409))
        c = self._commit_of(repo, start, hit)
        if c is not None:
            with self.hub.lock:
                repo.branches[branch] = c.sha
            self._json({}, hit(200))

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
            if oid in self.hub.objects and len(self.hub.objects[oid]) == size:
                return self._json({}, hit(200, oid))
            return self._error(404, None, "Object not found", hit(404, oid))
        objects = []
        for o in body.get("objects", []):
            oid, size = o["oid"], int(o["size"])
            entry = {"oid": oid, "size": size, "authenticated": True}
            if self.hub.objects.get(oid) is None or len(self.hub.objects[oid]) != size:
                prefix = "datasets/" if rtype == "dataset" else ""
                entry["actions"] = {
                    "upload": {"href": f"http://localhost:{self.hub.port}/storage/{oid}?sig="
                                       f"{self.hub.sign(oid)}&size={size}&repo={quote(repo_id)}",
                               "expires_at": "2099-01-01T00:00:00Z"},
                    "verify": {"href": f"{self.hub.url}/{prefix}{repo_id}.git/info/lfs/objects/"
                                       f"verify", "header": {}}}
            objects.append(entry)
        self._send(200, json.dumps({"transfer": "basic", "objects": objects}).encode(),
                   hit(200), {"Content-Type": "application/vnd.git-lfs+json"})

    def _storage(self, method, oid, query):
        repo_id = query.get("repo", [None])[0]
        hit = lambda status: self._hit(method, "upload", repo_id, oid, status)  # noqa: E731
        if method != "PUT" or query.get("sig", [""])[0] != self.hub.sign(oid):
            return self._send(403, b"AccessDenied", hit(403))
        hold = self.hub.holds.get(oid)
        if hold is not None:
            hold.reached.set()
            hold.released.wait(60)   # the test releases it (or kills the uploader first)
        cut = self.hub.take(self.hub.upload_cuts, oid)
        if cut is not None:          # read part of the body, then drop the connection
            self._consumed = True
            self.rfile.read(cut)
            self.hub.log.append(hit(0))
            self.close_connection = True
            return
        data = self._body()
        failed = self.hub.take(self.hub.upload_fails, oid)
        if failed is not None:
            return self._error(failed, None, "Upload refused (stand-in hook)", hit(failed))
        size = int(query.get("size", [len(data)])[0])
        if hashlib.sha256(data).hexdigest() != oid or len(data) != size:
            return self._error(400, None, f"sha256/size mismatch for {oid}: got "
                               f"{len(data)} bytes", hit(400))
        self.hub.objects[oid] = data
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
                data = self.hub.objects.get(value["oid"])
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
        with self.hub.lock:
            c = repo.commit(branch, files, header.get("summary", ""),
                            header.get("description", ""))
        prefix = "datasets/" if repo.type == "dataset" else ""
        self._json({"commitUrl": f"{self.hub.url}/{prefix}{repo_id}/commit/{c.sha}",
                    "commitOid": c.sha, "pullRequestUrl": None}, hit(200))
