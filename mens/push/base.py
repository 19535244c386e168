"""What a pushed card says of the base model: its identity (hub id, revision, the embedded rung's
pinned bytes) and its licence — read on this machine only (a local path, the embedded asset, or
the hub cache), never fetched. Shared by the model card (card.py) and the GGUF card (usage.py).
"""
from __future__ import annotations

from pathlib import Path

from mens.run.rundir import RunDir


def gib(n) -> str:
    return "—" if n is None else f"{n / 2**30:.2f} GiB"


def base_identity(spec: dict) -> dict:
    """{repo_id, revision (a hub commit, or None), pin (what names the bytes), bundled}."""
    from mens.resources import ASSETS

    r = spec.get("rung") or {}
    commit = r.get("commit") or r.get("revision")
    pin = commit
    if r.get("tokenizer_bundled"):      # the embedded asset: its weights' sha256 names it
        sums = (ASSETS / str(r.get("name")) / "SHA256SUMS")
        if sums.is_file():
            words = sums.read_text().split()
            pin = "sha256:" + words[words.index("model.safetensors") - 1]
    return {"repo_id": r.get("repo_id"), "revision": commit, "pin": pin,
            "bundled": bool(r.get("tokenizer_bundled")), "name": r.get("name")}


LICENSE_FILE = "LICENSE.md"   # license_link of a card whose licence is `other` (the Hub wants one)


def license_file(run_dir: Path | str) -> str | None:
    """LICENSE.md's text when the card's licence is `other` (the Hub's metadata check requires
    `license_name` and `license_link` then): what is known of the base's terms; None otherwise."""
    spec = RunDir(run_dir).read_spec()
    lic, note = base_license(spec)
    if lic != "other":
        return None
    base = (spec.get("rung") or {}).get("repo_id")
    return (f"# Licence\n\nThese weights are derived from the base model `{base}` and are bound "
            f"by its licence. mens could not read that licence on the machine that pushed them: "
            f"{note}.\n")


def base_license(spec: dict) -> tuple[str, str]:
    """(license id, note): the base's card's `license` when its README.md is on this machine
    (a local rung.path, the embedded asset, or the local hub cache: never the network)."""
    from huggingface_hub import ModelCard

    from mens.resources import ASSETS

    r = spec.get("rung") or {}
    dirs = [Path(r["path"])] if r.get("path") else []
    if r.get("tokenizer_bundled"):
        dirs.append(ASSETS / str(r.get("name")))
    elif r.get("repo_id"):
        try:
            from mens.source.weights import find_weights
            st = find_weights(r["repo_id"], r.get("commit") or r.get("revision"))
            dirs += [Path(st.path)] if st.path else []
        except Exception:     # noqa: BLE001 — no cache entry: the note says so below
            pass
    for d in dirs:
        # a README without front matter has no licence to read (and ModelCard.load would log
        # a warning for it)
        if (d / "README.md").is_file() and (d / "README.md").read_text()[:4] == "---\n":
            try:
                lic = ModelCard.load(d / "README.md", ignore_metadata_errors=True).data.license
            except Exception:   # noqa: BLE001 — an unparsable card counts as no licence given
                lic = None
            if lic:
                return str(lic), f"inherited from the base model's card ({r.get('repo_id')})"
    return "other", (f"the base model ({r.get('repo_id')}) states no licence in a card mens "
                     f"could read on the pushing machine, so this card says `other`: the base's "
                     f"own terms apply — check them before use")
