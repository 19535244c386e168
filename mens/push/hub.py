"""Upload a folder to the Hugging Face Hub: the one upload client of mens (torch-free).

`upload` makes the repo when it is missing (private unless told otherwise), the branch when one is
named and missing (from `revision`), then ONE commit with every file of the folder — the model
card and the weights arrive together or not at all. huggingface_hub does the protocol
(HfApi.create_repo / create_branch / create_commit; imported inside the functions):

- The README's metadata is checked by the Hub (POST /api/validate-yaml) first, before the repo
  is created or any byte hashed or uploaded, so a card the Hub would refuse costs nothing and
  leaves nothing behind (create_commit checks it again, as it always does).
- Unchanged files are not sent: the Hub's preupload answer carries the oid of each file already on
  the branch, the client drops files whose content matches, and a push that changes nothing makes
  no commit at all (`changed` is then []).
- An interrupted push is finished by running it again: the commit only happens after every upload
  succeeded, and large (LFS/Xet) objects that reached the Hub before the interruption are not sent
  again (the LFS batch API, or Xet's deduplication, reports them as present).

The token comes from HF_TOKEN in the environment only — never `hf auth login`'s stored file, never
a config — is passed to huggingface_hub explicitly and never written, printed or put in a message.
HF_ENDPOINT (read now) says where the Hub is. Every failure the user can fix is a ConfigError
(exit 2) or RunFailed (exit 4) in one paragraph naming the way out.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from mens.errors import ConfigError, MensError, RunFailed
from mens.source.hub import endpoint, exception_chain, http_lib, offline

KEY = "push.repo"


def repo_url(repo_id: str, repo_type: str = "model") -> str:
    return f"{endpoint()}/{'datasets/' if repo_type == 'dataset' else ''}{repo_id}"


def require_token(repo_id: str) -> str:
    """HF_TOKEN from the environment, checked before any network; ConfigError (push.repo) when
    HF_HUB_OFFLINE=1 or no token is set."""
    if offline():
        raise ConfigError(f"push.repo={repo_id}: HF_HUB_OFFLINE=1 (or TRANSFORMERS_OFFLINE=1) is "
                          f"set, so nothing may be sent to {endpoint()}; unset it on a machine "
                          f"with network access and re-run the push.", key=KEY)
    token = os.environ.get("HF_TOKEN", "").strip()
    if not token:
        raise ConfigError(f"push.repo={repo_id}: pushing needs a Hugging Face token with write "
                          f"access to {repo_id.split('/')[0]} and HF_TOKEN is not set. Create one "
                          f"at {endpoint()}/settings/tokens (type \"Write\", or fine-grained with "
                          f"write access to that namespace's repos) and export it in the "
                          f"environment as HF_TOKEN (never in a config file or the repo), then "
                          f"re-run.", key=KEY)
    return token


def folder_files(folder: Path) -> list[str]:
    """The files upload sends: every file under `folder` (posix paths, sorted), less .git and
    .cache/huggingface as huggingface_hub's upload_folder leaves them out."""
    from huggingface_hub.utils import DEFAULT_IGNORE_PATTERNS, filter_repo_objects
    names = [p.relative_to(folder).as_posix() for p in sorted(folder.rglob("*")) if p.is_file()]
    return list(filter_repo_objects(names, ignore_patterns=DEFAULT_IGNORE_PATTERNS))


def upload(folder, repo_id: str, *, repo_type: str = "model", private: bool = True,
           branch: str | None = None, revision: str | None = None, message: str,
           description: str = "", log=print) -> dict:
    """Push every file of `folder` to repo_id in one commit on `branch` (None: main).

    The repo is created (private=`private`) when missing; an existing repo keeps its visibility
    (the result's "private" says which it has). A missing `branch` is created from `revision`
    (None: main); `revision` is ignored without `branch`. Returns {"repo_id", "repo_type", "url",
    "branch", "commit", "commit_url", "created", "private", "files", "changed"}: `changed` lists the
    files whose content differed from what the branch held (all of them on a new repo); [] means
    nothing was sent and no commit made (`commit` is then the branch's head). `log` gets a line
    for each request that is not followed (private on an existing public repo, revision without
    branch)."""
    from huggingface_hub import CommitOperationAdd, HfApi
    from huggingface_hub.errors import RepositoryNotFoundError

    token = require_token(repo_id)
    folder = Path(folder)
    files = folder_files(folder) if folder.is_dir() else []
    if not files:
        raise ConfigError(f"push.repo={repo_id}: {folder} is not a folder with files in it, so "
                          f"there is nothing to upload; name the folder that holds the files to "
                          f"push.",
                          key=KEY)
    target = branch or "main"
    if revision and not branch:
        log(f"mens push: push.revision={revision} is ignored without push.branch (it says where a "
            f"new branch starts); the commit goes on main")
    api = HfApi(endpoint=endpoint(), token=token, library_name="mens")
    try:
        _check_card(folder, repo_type, token)    # first: a card the Hub refuses leaves no repo
        try:
            info = api.repo_info(repo_id, repo_type=repo_type, token=token)
            created, is_private = False, bool(info.private)
            if private and not is_private:
                log(f"mens push: {repo_id} already exists and is PUBLIC; push.private=true only "
                    f"applies to a repo mens creates, so the files will be public (make it "
                    f"private on {repo_url(repo_id, repo_type)}/settings first if they must not "
                    f"be)")
        except RepositoryNotFoundError:
            api.create_repo(repo_id, repo_type=repo_type, private=private, exist_ok=True,
                            token=token)
            created, is_private = True, private
        if branch:
            api.create_branch(repo_id, branch=branch, revision=revision, repo_type=repo_type,
                              exist_ok=True, token=token)
        changed = _changed(api, folder, files, repo_id, repo_type, target, token)
        ops = [CommitOperationAdd(path_in_repo=f, path_or_fileobj=str(folder / f)) for f in files]
        commit = api.create_commit(repo_id, ops, commit_message=message,
                                   commit_description=description, repo_type=repo_type,
                                   revision=target, token=token)
    except MensError:
        raise
    except Exception as e:   # noqa: BLE001 — _explain decides; what it cannot name is re-raised
        err = _explain(e, repo_id, repo_type, target, revision, folder)
        if err is None:
            raise
        raise type(err)(err.message.replace(token, "<HF_TOKEN>"), key=err.key) from None
    return {"repo_id": repo_id, "repo_type": repo_type, "url": repo_url(repo_id, repo_type),
            "branch": target, "commit": commit.oid, "commit_url": commit.commit_url,
            "created": created, "private": is_private, "files": files, "changed": changed}


def _check_card(folder: Path, repo_type: str, token: str) -> None:
    """The Hub's own check of README.md's metadata (POST /api/validate-yaml, as create_commit
    does it), made before the repo is created or any file hashed; ConfigError on a refusal."""
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    readme = folder / "README.md"
    if not readme.is_file():
        return
    r = get_session().post(f"{endpoint()}/api/validate-yaml",
                           json={"content": readme.read_text(encoding="utf-8"),
                                 "repoType": repo_type},
                           headers=build_hf_headers(token=token, library_name="mens"))
    if r.status_code == 400:
        try:
            errors = [str(x.get("message")) for x in r.json().get("errors", [])]
        except ValueError:
            errors = [r.text]
        raise ConfigError(f"{endpoint()} refused the metadata of {readme} before anything was "
                          f"uploaded: {'; '.join(errors) or r.text}. Fix the card's YAML "
                          f"metadata (between the --- lines at its top), then re-run.", key="push")
    hf_raise_for_status(r)


def _changed(api, folder: Path, files: list[str], repo_id, repo_type, target, token) -> list[str]:
    """The files whose content differs from the branch's: compared as the Hub stores them (LFS by
    sha256, regular files by git blob sha1), the way the client itself drops unchanged files."""
    from huggingface_hub.hf_api import RepoFile

    remote = {e.path: e for e in api.get_paths_info(repo_id, files, revision=target,
                                                    repo_type=repo_type, token=token)
              if isinstance(e, RepoFile)}
    out = []
    for f in files:
        entry, path = remote.get(f), folder / f
        if entry is None or entry.size != path.stat().st_size:   # no hashing needed
            out.append(f)
        elif entry.lfs is not None:
            if _digest(path, hashlib.sha256()) != entry.lfs.sha256:
                out.append(f)
        elif _digest(path, hashlib.sha1(b"blob %d\0" % entry.size)) != entry.blob_id:
            out.append(f)
    return out


def _digest(path: Path, h) -> str:
    """hexdigest of `h` fed with the file, in 8 MiB reads (weights may be gigabytes)."""
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            h.update(chunk)
    return h.hexdigest()


def _explain(e: BaseException, repo_id, repo_type, target, revision, folder) -> MensError | None:
    """One paragraph for a failed push: the most specific cause in the exception chain."""
    from huggingface_hub import errors as hf

    chain = list(exception_chain(e))
    first = lambda *types: next((x for x in chain if isinstance(x, types)), None)  # noqa: E731
    page, ns = repo_url(repo_id, repo_type), repo_id.split("/")[0]
    again = ("Files whose upload completed stay on the Hub and are not sent again: re-run the "
             "same push to finish it.")
    http = first(hf.HfHubHTTPError)
    status = http.response.status_code if http is not None and http.response is not None else 0
    url = str(http.response.request.url) if status and http.response.request is not None else ""
    bad_card = next((x for x in chain if isinstance(x, ValueError)
                     and "Invalid metadata in README.md" in str(x)), None)
    if bad_card is not None:
        return ConfigError(f"{endpoint()} refused the card {folder / 'README.md'} before "
                           f"anything was uploaded: {' '.join(str(bad_card).split())} Fix the "
                           f"card's YAML metadata (between the --- lines), then re-run.", key=KEY)
    if first(hf.RevisionNotFoundError):
        if revision and target != "main":
            return ConfigError(f"push.revision={revision!r} does not exist in {repo_id}: set it "
                               f"to a branch, tag or commit of {page} (or null to start "
                               f"push.branch={target} from main).", key="push.revision")
        return ConfigError(f"branch {target!r} of {repo_id} vanished during the push; re-run.",
                           key="push.branch")
    if status in (401, 403) and url.startswith(endpoint()):
        return ConfigError(f"{endpoint()} refused to write to {repo_id} (HTTP {status}): the "
                           f"token in HF_TOKEN has no write access to {ns}. Create a write token "
                           f"(or a fine-grained one with write access to {ns}'s repos) at "
                           f"{endpoint()}/settings/tokens with an account that may create repos "
                           f"in {ns}, set it in the environment as HF_TOKEN, then re-run.", key=KEY)
    if first(hf.RepositoryNotFoundError):
        return ConfigError(f"{repo_id} is not visible on {endpoint()} even after creating it: the "
                           f"token in HF_TOKEN cannot read {ns}'s repos (a fine-grained token "
                           f"needs read and write access to that namespace), or {repo_id} is a "
                           f"repo of another type than {repo_type}. Fix the token or push.repo, "
                           f"then re-run.", key=KEY)
    lib = http_lib()
    if first(lib.ConnectError) and not first(lib.RemoteProtocolError, lib.WriteError):
        return ConfigError(f"could not reach {endpoint()} (HF_ENDPOINT) to push {repo_id}: no "
                           f"network, or HF_ENDPOINT names the wrong host. Check the connection "
                           f"(and HF_ENDPOINT, unset for huggingface.co), then re-run.", key=KEY)
    if first(lib.HTTPError, hf.HfHubHTTPError, OSError, RuntimeError, ValueError):
        what = f"HTTP {status}" if status else f"{type(chain[-1]).__name__}: {chain[-1]}"
        up = next((x for x in chain if isinstance(x, RuntimeError)      # names the file
                   and str(x).startswith("Error while uploading")), None)
        what = f"{str(up).rstrip('.')} ({what})" if up is not None else what
        return RunFailed(f"the push of {folder} to {page} (branch {target}) stopped, nothing "
                         f"was committed: {what}. {again}")
    return None
