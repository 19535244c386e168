"""structured_shell scripts (d6-10): whole scripts with strict mode, safe quoting and JSON/TSV
output; a two-turn revision; and agentic sessions that inspect data with a `bash` tool first."""
from __future__ import annotations

from .common import fence, join, jdump, msg, record
from .shell_data import DOMAINS, compact, jq_check, pretty, rows

SYS = ("You write robust Bash: `set -euo pipefail`, quoted expansions, `--` before paths, "
       "structured (JSON/TSV) output via jq. Put scripts in ```bash blocks.")
TOOLS = "<tools>\n" + jdump({"name": "bash", "description": "Run a shell command in the "
                             "user's project; returns stdout, stderr and the exit code.",
                             "parameters": {"type": "object", "properties": {
                                 "command": {"type": "string"}}, "required": ["command"]}}) + \
    "\n</tools>"


def probe(c, p, tsv):
    emit = ("printf '%s\\t%s\\t%s\\n' \"$" + p["v"] + "\" \"$code\" \"$secs\"" if tsv else
            "jq -n -c --arg url \"$" + p["v"] + "\" --arg code \"$code\" --arg secs \"$secs\" \\\n"
            "    '{url: $url, code: ($code | tonumber), seconds: ($secs | tonumber)}'")
    tail = "" if tsv else " | jq -s ."
    return f"""#!/usr/bin/env bash
# {p['name']}: probe every URL listed in a file ({p['file']}), {'TSV' if tsv else 'a JSON array'} out.
set -euo pipefail

{p['f']}=${{1:-{p['file']}}}
{p['t']}=${{{p['env']}:-{p['timeout']}}}

while IFS= read -r {p['v']}; do
  [[ -z "${p['v']}" || "${p['v']}" == \\#* ]] && continue
  # curl still prints -w (code 000) when it fails; `|| true` keeps set -e from ending the loop
  out=$(curl -o /dev/null -sS --max-time "${p['t']}" -w '%{{http_code}} %{{time_total}}' \\
    -- "${p['v']}") || true
  read -r code secs <<<"${{out:-000 0}}"
  {emit}
done <"${p['f']}"{tail}"""


def probe_params(c):
    return {"name": c.pick(["check_urls.sh", "probe.sh", "uptime_probe.sh", "ping_endpoints.sh",
                            "healthz.sh", "url_status.sh", "sweep.sh", "http_check.sh", "pulse.sh"]),
            "file": c.pick(["urls.txt", "endpoints.txt", "targets.list", "hosts.txt", "probe.lst",
                            "checks.txt", "watch.txt", "sites.txt", "monitors.txt"]),
            "f": c.pick(["urls_file", "list", "targets", "input", "src", "listing"]),
            "t": c.pick(["timeout", "max_secs", "limit", "wait_s", "deadline", "budget"]),
            "v": c.pick(["url", "endpoint", "target", "link", "addr", "site"]),
            "env": c.pick(["TIMEOUT", "PROBE_TIMEOUT", "MAX_TIME", "CHECK_TIMEOUT", "HTTP_WAIT",
                           "CURL_WAIT"]),
            "timeout": c.randint(2, 15), "kind": "probe"}


def prune(c, p, tsv):
    summary = ("printf '%s\\n' \"${deleted[@]}\"" if tsv else
               "printf '%s\\0' \"${deleted[@]}\" | jq -R -s -c --argjson dry \"$dry_run\" \\\n"
               "  '{dry_run: $dry, deleted: (split(\"\\u0000\") | map(select(length > 0)))}'")
    return f"""#!/usr/bin/env bash
# {p['name']}: keep the {p['keep']} newest {p['glob']} in a directory, delete older ones.
set -euo pipefail

{p['d']}=${{1:?usage: {p['name']} DIR [--dry-run]}}
dry_run=false
[[ "${{2:-}}" == "--dry-run" ]] && dry_run=true

mapfile -d '' {p['arr']} < <(find "${p['d']}" -maxdepth 1 -type f -name '{p['glob']}' \\
  -printf '%T@ %p\\0' | sort -z -rn | cut -z -d' ' -f2-)
deleted=()
for f in "${{{p['arr']}[@]:{p['keep']}}}"; do
  "$dry_run" || rm -f -- "$f"
  deleted+=("$f")
done
{summary}"""


def prune_params(c):
    return {"name": c.pick(["prune_backups.sh", "rotate.sh", "keep_latest.sh", "trim_dumps.sh",
                            "gc_snapshots.sh", "retain.sh", "cull.sh", "tidy_backups.sh",
                            "expire.sh"]),
            "glob": c.pick(["db-*.sql.gz", "snapshot-*.tar.zst", "*.dump", "backup_*.tgz",
                            "site-*.zip", "logs-*.tar.gz", "pg_*.backup", "vm-*.qcow2",
                            "export-*.ndjson"]),
            "d": c.pick(["dir", "backup_dir", "root", "where", "store", "vault"]),
            "arr": c.pick(["files", "backups", "found", "snaps", "archives", "dumps"]),
            "keep": c.randint(3, 14), "kind": "prune"}


def disk(c, p, tsv):
    out = ("" if tsv else f""" \\
  | jq -R -s --argjson t "${p['t']}" \\
    '{{threshold: $t, alerts: (split("\\n") | map(select(length > 0) | split("\\t")
      | {{mount: .[0], device: .[1], used_pct: (.[2] | tonumber)}}))}}'""")
    return f"""#!/usr/bin/env bash
# {p['name']}: filesystems at or above {p['default']}% use{'' if tsv else ', as JSON'}.
set -euo pipefail

{p['t']}=${{1:-{p['default']}}}
df -P -x tmpfs -x devtmpfs \\
  | awk -v t="${p['t']}" 'NR > 1 {{ u = $5; sub(/%/, "", u); if (u + 0 >= t) printf "%s\\t%s\\t%d\\n", $6, $1, u }}'{out}"""


def disk_params(c):
    return {"name": c.pick(["disk_alert.sh", "df_watch.sh", "full_disks.sh", "space_check.sh",
                            "fs_usage.sh", "capacity.sh", "storage_alarm.sh", "df_json.sh",
                            "quota_warn.sh"]),
            "t": c.pick(["threshold", "limit", "max_pct", "warn_at", "cap", "level"]),
            "default": c.randint(70, 95), "kind": "disk"}


def detail(p) -> str:
    """The specifics a real request states (and that make each request distinct)."""
    if p["kind"] == "probe":
        return f"URLs come from {p['file']}, timeout {p['timeout']}s overridable via ${p['env']}"
    if p["kind"] == "prune":
        return f"the backups match {p['glob']}; keep the {p['keep']} newest"
    return f"alert at {p['default']}% by default"


SCRIPTS = {"probe": (probe, probe_params, "probes each URL in a list and reports status code "
                     "and time"),
           "prune": (prune, prune_params, "keeps only the newest backups in a directory"),
           "disk": (disk, disk_params, "reports filesystems above a usage threshold")}


def script_once(c):
    kind = c.pick(sorted(SCRIPTS))         # eval scripts are a kind training never shows
    make, params, what = SCRIPTS[kind]
    p = params(c)
    user = c.pick([f"Write a bash script, {p['name']}, that {what} ({detail(p)}). JSON output.",
                   f"I need {p['name']}: it {what}; {detail(p)}. Output should be JSON for jq.",
                   f"Script please ({p['name']}) that {what} — {detail(p)}, machine-readable "
                   f"output."])
    notes = {"probe": "`read -r` keeps backslashes, `--` protects against URLs starting with `-`, "
                      "and a failed curl still yields a row (code 0) instead of killing the loop.",
             "prune": "`find -printf '%T@ %p\\0'` + `sort -z` orders by mtime without parsing "
                      "`ls`, and NUL separators survive any file name. Run with `--dry-run` "
                      "first.",
             "disk": "`df -P` guarantees one line per filesystem (no wrapping); tmpfs is skipped."}
    ans = join(fence("bash", make(c, p, False)), c.prose(notes[kind]))
    return record([msg("system", SYS), msg("user", user), msg("assistant", ans)],
                  c.choice([6, 7]), "reasoning", f"script_{kind}")


def script_revise(c):
    kind = c.pick(sorted(SCRIPTS))
    make, params, what = SCRIPTS[kind]
    p = params(c)
    first = make(c, p, False)
    second = make(c, p, True)
    msgs = [msg("system", SYS),
            msg("user", c.pick([f"Bash script {p['name']} that {what}, JSON output; {detail(p)}.",
                                f"Can you write {p['name']}? It {what} ({detail(p)}). JSON please.",
                                f"{p['name']}: {what}, {detail(p)}, JSON out."])),
            msg("assistant", join(fence("bash", first))),
            msg("user", c.pick(["Actually our dashboard ingests plain text: can it print "
                                "tab-separated lines instead of JSON?", "Drop the JSON — plain "
                                "TSV / one item per line is easier for awk downstream.",
                                "Make it print plain lines (TSV) instead, no jq dependency."])),
            msg("assistant", join(c.prose("Same logic, plain output, no jq needed:"),
                                  fence("bash", second)))]
    return record(msgs, 8, "multi_turn", f"script_revise_{kind}")


def agentic(c):
    dom = c.pick(DOMAINS)
    stem, idf, _, cat, cats, num = dom
    data, want = rows(c, dom, c.randint(4, 6)), c.choice(cats)
    wrapped = {"items": data, "next_page": None}
    prog = f'.items[] | select(.{cat} == $want) | [.{idf}, .{num}] | @tsv'
    out = "\n".join(f"{r[idf]}\t{r[num]}" for r in data if r[cat] == want)
    jq_check(["-r", "--arg", "want", want, prog], compact(wrapped), out)
    call = lambda cmd: f"<tool_call>\n{jdump({'name': 'bash', 'arguments': {'command': cmd}})}\n</tool_call>"
    cmd = f"jq -r --arg want {want} '{prog}' {stem}.json"
    msgs = [msg("system", SYS + "\n\n" + TOOLS),
            msg("user", c.pick([f"In {stem}.json, give me {idf} and {num} (TSV) for the {want} "
                                f"ones.", f"TSV of {idf}/{num} where {cat} is {want}, from "
                                f"{stem}.json.", f"Extract {want} entries from {stem}.json as "
                                f"{idf}<TAB>{num}."])),
            msg("assistant", c.pick(["First, the file's shape.", "Checking the structure "
                                     "before writing the filter.", "Let me look at the data."])
                + "\n" + call(f"jq 'keys, (.items[0] // .[0])' {stem}.json")),
            msg("tool", jdump({"stdout": pretty(["items", "next_page"]) + "\n" + pretty(data[0]),
                               "exit": 0})),
            msg("assistant", c.pick(["It's an object with an `items` array (paginated), not a "
                                     "bare array, so the filter starts at `.items[]`.",
                                     "Wrapped in `{items, next_page}`: iterate `.items[]`.",
                                     "The records sit under `.items`; `.[]` alone would iterate "
                                     "the object's values."]) + "\n" + call(cmd)),
            msg("tool", jdump({"stdout": out + ("\n" if out else ""), "exit": 0}))]
    final = join(fence("bash", cmd), c.pick([f"Output ({len(out.splitlines())} rows):",
                                             "Result:", "It prints:"]),
                 fence("text", out) if out else f"No entry has {cat} {want} in this page.")
    d = 9
    if c.chance(0.5):
        script = (f"#!/usr/bin/env bash\n# {stem}_by_{cat}.sh {cat.upper()}: {idf}<TAB>{num} "
                  f"of the {stem} with that {cat}, every page.\nset -euo pipefail\n\n"
                  f"{cat}=${{1:?usage: $0 {cat.upper()}}}\nfor page in {stem}*.json; do\n"
                  f"  jq -r --arg want \"${cat}\" '{prog}' \"$page\"\ndone")
        msgs += [msg("assistant", c.pick([
            "As a reusable script over every page file; syntax check:",
            "Wrapping it in a script that loops over all pages, then `bash -n` on it:",
            "Saving a version that takes the value as an argument and checking it parses:"])
                     + "\n" + call(f"cat > {stem}_by_{cat}.sh <<'EOF'\n{script}\nEOF\nbash -n "
                            f"{stem}_by_{cat}.sh && echo syntax ok")),
                 msg("tool", jdump({"stdout": "syntax ok\n", "exit": 0}))]
        final = join(final, f"Reusable over all pages (`{stem}_by_{cat}.sh {want}`):",
                     fence("bash", script))
        d = 10
    msgs.append(msg("assistant", final))
    return record(msgs, d, "agentic", "shell_agentic")


SCRIPT_TEMPLATES = [(4, script_once), (3, script_revise), (3, agentic)]
