"""The stand-in Hub's repositories (tests/hub_server.py): commits and branches, which files
are LFS, the git and LFS object ids the Hub gives them.

Revisions are branch names or full commit shas; every commit gets a new sha on its branch. A file
is LFS when its name has an LFS suffix or it is larger than 10 MB (everywhere: preupload, tree,
resolve).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

LFS_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pth", ".pt", ".onnx", ".model", ".parquet")
LFS_MIN_SIZE = 10 * 1024 * 1024          # the Hub stores larger files as LFS whatever their name
DATE = "2026-11-30T00:00:00.000Z"
GITATTRIBUTES = "".join(f"*{s} filter=lfs diff=lfs merge=lfs -text\n"
                        for s in LFS_SUFFIXES).encode()


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
