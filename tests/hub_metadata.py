"""The stand-in Hub's metadata validation (POST /api/validate-yaml, and every commit that
changes README.md), for tests/hub_server.py.

validate-yaml is this stand-in's SUBSET of the Hub's metadata validation, the parts mens writes:
the front matter must be a YAML mapping; `model-index` must parse with huggingface_hub's own
`model_index_to_eval_results`; `license` a Hub licence id (LICENSES) or a list of them, and
`other` needs `license_name` and `license_link`; `base_model` a string or a list of strings. No
front matter → 200 with the Hub's "Empty or missing yaml metadata" warning.
"""
from __future__ import annotations

import re

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


class MetadataRoutes:
    """POST /api/validate-yaml {content, repoType} → 200 {errors: [], warnings} or 400."""

    def _validate(self):
        body = self._json_body() or {}
        hit = lambda status: self._hit("POST", "validate", None, None, status)  # noqa: E731
        errors, warnings = validate_metadata(str(body.get("content", "")),
                                             body.get("repoType") or "model")
        out = {"errors": [{"message": m} for m in errors],
               "warnings": [{"message": m} for m in warnings]}
        self._json(out, hit(400 if errors else 200))
