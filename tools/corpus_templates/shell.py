"""structured_shell: pipelines (jq/awk/find/xargs) and scripts whose output is JSON or TSV.
Stated jq outputs are computed from the sample shown and cross-checked with jq when present
(shell_data.jq_check); every ```bash block must pass `bash -n` (the admission check)."""
from __future__ import annotations

from collections import Counter, defaultdict

from .common import fence, join, msg, record
from .shell_data import DIRS, DOMAINS, EXTS, compact, jq_check, pretty, rows

SYSTEM = [
    "You write shell commands whose output is machine-readable (JSON or TSV). Quote every "
    "expansion, pass shell values to jq with --arg/--argjson, and make destructive commands "
    "safe (dry run first, -print0/xargs -0, `--` before paths). Code goes in ```bash blocks.",
    "Shell assistant. Prefer jq for JSON, awk for columns; outputs must parse. Never interpolate "
    "variables into a jq program; never `rm` without a preview.",
    "You are a careful Bash expert: POSIX-friendly pipelines, `set -euo pipefail` in scripts, "
    "structured output. Answer with the command in a ```bash block and a short explanation.",
]


def ask(c, *variants):
    return c.pick(list(variants))


def with_data(user: str, name: str, lang: str, body: str) -> str:
    """An answer that states an output must be answerable: show the input it was computed on."""
    return user if body in user else f"{user}\n\n`{name}`:\n{fence(lang, body)}"


def ask_any(c, *variants):
    """For eval-only families (HELD_OUT): no partition needed, all phrasings available."""
    return c.choice(list(variants))


def j_select(c):
    dom = c.pick(DOMAINS)
    stem, idf, _, cat, cats, num = dom
    data, want = rows(c, dom), c.choice(cats)
    use_arg = c.chance(0.5)
    prog = f'.[] | select(.{cat} == $want) | .{idf}' if use_arg else \
        f'.[] | select(.{cat} == "{want}") | .{idf}'
    args = ["-r", "--arg", "want", want, prog] if use_arg else ["-r", prog]
    out = "\n".join(r[idf] for r in data if r[cat] == want)
    jq_check(args, compact(data), out)
    cmd = (f'want="{want}"\njq -r --arg want "$want" \'{prog}\' {stem}.json' if use_arg
           else f"jq -r '{prog}' {stem}.json")
    user = with_data(ask(c, f"`{stem}.json` looks like this:\n{fence('json', pretty(data))}\n"
                         f"Print the {idf} of every entry whose {cat} is {want}, one per line.",
                         f"List the {idf}s in {stem}.json with {cat} = {want}.",
                         f"jq one-liner: {idf} values where .{cat} is \"{want}\" in {stem}.json"),
                     f"{stem}.json", "json", pretty(data))
    why = c.prose("`-r` prints raw strings instead of JSON-quoted ones.",
                  "The value comes in through `--arg`, so quotes or spaces in it cannot break the "
                  "jq program." if use_arg else "")
    ans = join(fence("bash", cmd), why, c.prose(f"On those {len(data)} entries it prints:" if out
                                                else f"No entry has {cat} {want}, so it prints "
                                                     f"nothing."), c.prose(fence("text", out) if out else ""))
    return record([msg("system", c.choice(SYSTEM)), msg("user", user), msg("assistant", ans)],
                  1 + use_arg, "warmup", "jq_select")


def j_tsv(c):
    dom = c.pick(DOMAINS)
    stem, idf, _, cat, cats, num = dom
    data, t = rows(c, dom), c.randint(50, 400)
    prog = f".[] | select(.{num} > {t}) | [.{idf}, .{cat}, .{num}] | @tsv"
    out = "\n".join(f"{r[idf]}\t{r[cat]}\t{r[num]}" for r in data if r[num] > t)
    jq_check(["-r", prog], compact(data), out)
    user = ask(c, f"From {stem}.json (array of objects with {idf}, {cat}, {num}) give me a TSV "
               f"of the entries with {num} over {t}.", f"TSV please: {idf}, {cat} and {num} for "
               f"every {stem} entry where {num} > {t}. Input: {compact(data)}",
               f"I need tab-separated {idf}/{cat}/{num} rows from {stem}.json, only {num} above {t}.")
    user = with_data(user, f"{stem}.json", "json", compact(data))
    ans = join(fence("bash", f"jq -r '{prog}' {stem}.json"),
               c.prose("`@tsv` escapes tabs and newlines inside values, which a hand-built "
                       "`\"\\(.a)\\t\\(.b)\"` string would not."),
               c.prose("Output for that data:"), c.prose(fence("text", out)) if out else
               c.prose(f"For that data nothing is over {t}, so it prints nothing."))
    return record([msg("system", c.choice(SYSTEM)), msg("user", user), msg("assistant", ans)],
                  c.choice([3, 4]), "syntax", "jq_tsv")


def j_group(c):
    dom = c.choice(DOMAINS)
    stem, idf, _, cat, cats, num = dom
    data = rows(c, dom, c.randint(5, 7))
    prog = (f"group_by(.{cat}) | map({{{cat}: .[0].{cat}, count: length, "
            f"{num}: (map(.{num}) | add)}})")
    groups = defaultdict(list)
    for r in data:
        groups[r[cat]].append(r[num])
    out = compact([{cat: k, "count": len(v), num: sum(v)} for k, v in sorted(groups.items())])
    jq_check(["-c", prog], compact(data), out)
    user = ask_any(c, f"For {stem}.json, count entries per {cat} and sum their {num}, as JSON.",
               f"Group {stem}.json by {cat}: I want count and total {num} for each, JSON out. "
               f"Data: {compact(data)}", f"jq: per-{cat} count and {num} total from "
               f"{stem}.json")
    user = with_data(user, f"{stem}.json", "json", compact(data))
    ans = join(fence("bash", f"jq -c '{prog}' {stem}.json"),
               c.prose(f"`group_by` sorts by `{cat}` first, so groups come out in alphabetical "
                       f"order; drop `-c` for pretty output."),
               c.prose("With your data:"), c.prose(fence("json", out)))
    return record([msg("system", c.choice(SYSTEM)), msg("user", user), msg("assistant", ans)],
                  c.choice([4, 5]), "reasoning", "jq_group")


def awk_sum(c):
    dom = c.pick(DOMAINS)
    stem, idf, _, cat, cats, num = dom
    data = rows(c, dom, c.randint(5, 7))
    csv = f"{idf},{cat},{num}\n" + "\n".join(f"{r[idf]},{r[cat]},{r[num]}" for r in data)
    sums = Counter()
    for r in data:
        sums[r[cat]] += r[num]
    out = "\n".join(f"{k}\t{v}" for k, v in sorted(sums.items()))
    cmd = (f"awk -F, 'NR > 1 {{ sum[$2] += $3 }} END {{ for (k in sum) printf \"%s\\t%d\\n\", k, "
           f"sum[k] }}' {stem}.csv | sort")
    user = ask(c, f"Sum {num} per {cat} in this CSV ({stem}.csv), TSV output:\n{fence('text', csv)}",
               f"{stem}.csv has a header `{idf},{cat},{num}`. Total {num} for each {cat}, as "
               f"tab-separated lines.", f"awk: per-{cat} totals of column 3 in {stem}.csv "
               f"(skip the header), output key<TAB>total")
    user = with_data(user, f"{stem}.csv", "text", csv)
    ans = join(fence("bash", cmd), c.prose("`NR > 1` skips the header; `for (k in sum)` has no "
                                           "defined order, hence the `sort`."),
               c.prose(fence("text", out)))
    return record([msg("system", c.choice(SYSTEM)), msg("user", user), msg("assistant", ans)],
                  3, "syntax", "awk_sum")


def csv_json(c):
    dom = c.pick(DOMAINS)
    stem, idf, _, cat, cats, num = dom
    data = rows(c, dom, c.randint(3, 5))
    csv = f"{idf},{cat},{num}\n" + "\n".join(f"{r[idf]},{r[cat]},{r[num]}" for r in data) + "\n"
    prog = (f'split("\\n") | map(select(length > 0) | split(",")) | .[1:] '
            f'| map({{{idf}: .[0], {cat}: .[1], {num}: (.[2] | tonumber)}})')
    out = compact(data)
    jq_check(["-R", "-s", "-c", prog], csv, out)
    user = ask(c, f"Turn {stem}.csv (header {idf},{cat},{num}; no quoted fields) into a JSON "
               f"array with {num} as a number.", f"CSV → JSON with jq only, for {stem}.csv:\n"
               f"{fence('text', csv)}", f"Convert {stem}.csv to JSON objects keyed by the header "
               f"names ({num} numeric), no python.")
    user = with_data(user, f"{stem}.csv", "text", csv.rstrip("\n"))
    ans = join(fence("bash", f"jq -R -s -c '{prog}' {stem}.csv"),
               c.prose("`-R -s` reads the whole file as one string; `.[1:]` drops the header row. "
                       "This naive split is only right because no field contains a comma — for "
                       "quoted CSV use a real parser (e.g. `mlr --icsv --ojson cat`)."),
               c.prose(fence("json", out)))
    return record([msg("system", c.choice(SYSTEM)), msg("user", user), msg("assistant", ans)],
                  c.choice([5, 6]), "reasoning", "csv_to_json")


def top_ips(c):
    k = c.randint(2, 4)
    ips = [f"10.{c.randint(0, 9)}.{c.randint(0, 255)}.{c.randint(1, 254)}" for _ in range(5)]
    counts = sorted(c.rng.sample(range(1, 12), len(ips)), reverse=True)
    lines = [f'{ip} - - [12/Mar/2025:10:{i:02d}:00 +0000] "GET /{c.choice(["", "api", "login"])} '
             f'HTTP/1.1" 200 {c.randint(100, 9999)}' for ip, n in zip(ips, counts) for i in range(n)]
    log = c.choice(["access.log", "nginx/access.log", "/var/log/nginx/access.log", "proxy.log",
                  "logs/edge-access.log", "/var/log/httpd/access_log"])
    cmd = (f"awk '{{ print $1 }}' {log} | sort | uniq -c | sort -rn | head -n {k} \\\n"
           f"  | awk '{{ printf \"{{\\\"ip\\\":\\\"%s\\\",\\\"hits\\\":%d}}\\n\", $2, $1 }}' | jq -s -c .")
    out = compact([{"ip": ip, "hits": n} for ip, n in zip(ips, counts)][:k])
    user = ask_any(c, f"Top {k} client IPs in {log} by request count, as a JSON array of "
               f"{{ip, hits}}.", f"From the combined-format log {log}, which {k} IPs made the most "
               f"requests? JSON output please.", f"JSON list of the {k} busiest IPs in {log} "
               f"(ip and hits).")
    ans = join(fence("bash", cmd), c.prose("The first field of a combined log line is the client "
                                           "IP; `uniq -c` needs sorted input. Building JSON in awk "
                                           "is safe here only because IPs never contain quotes."),
               c.prose(f"For a log whose busiest clients are {', '.join(ips[:k])} it prints:"),
               c.prose(fence("json", out)))
    return record([msg("system", c.choice(SYSTEM)), msg("user", user), msg("assistant", ans)],
                  4, "syntax", "top_ips")


def safe_delete(c):
    d, ext, days = c.pick(DIRS), c.pick(EXTS), c.randint(2, 90)
    preview = f"find {d} -type f -name '*.{ext}' -mtime +{days} -print"
    delete = (f"find {d} -type f -name '*.{ext}' -mtime +{days} -print0 \\\n"
              f"  | xargs -0 --no-run-if-empty rm -f --")
    count = (f"find {d} -type f -name '*.{ext}' -mtime +{days} -printf '.' | wc -c \\\n"
             f"  | jq -R '{{dir: \"{d}\", older_than_days: {days}, matching: tonumber}}'")
    user = ask(c, f"Delete *.{ext} files older than {days} days under {d} — safely, some names "
               f"have spaces — and report how many as JSON.", f"Clean up {d}: remove .{ext} files "
               f"not modified for {days}+ days. Preview first please, and JSON count.",
               f"Safe way to purge old (> {days} days) *.{ext} from {d}? I want a dry run and a "
               f"JSON summary.")
    ans = join(c.prose("Preview what would go:"), fence("bash", preview),
               c.prose("Count it as JSON (before deleting):"), fence("bash", count),
               c.prose("Then delete:"), fence("bash", delete),
               c.prose("`-print0` with `xargs -0` survives spaces and newlines in names, `--` stops "
                       "a name starting with `-` from becoming an option, and "
                       "`--no-run-if-empty` avoids running `rm` with no arguments."))
    return record([msg("system", c.choice(SYSTEM)), msg("user", user), msg("assistant", ans)],
                  c.choice([5, 6]), "reasoning", "safe_delete")


def git_authors(c):
    n = c.randint(1, 12)
    unit = c.pick(["days", "weeks", "months"])
    branch = c.pick(["main", "develop", "release/2.4", "origin/main", "trunk", "staging"])
    cmd = (f"git log {branch} --since=\"{n} {unit} ago\" --no-merges --format='%an' \\\n"
           f"  | sort | uniq -c | sort -rn \\\n"
           f"  | awk '{{ n = $1; $1 = \"\"; sub(/^ /, \"\"); printf \"%s\\t%d\\n\", $0, n }}'")
    user = ask(c, f"Commits per author on {branch} in the last {n} {unit}, TSV (author, count), "
               f"busiest first.", f"Who committed most to {branch} over the past {n} {unit}? "
               f"Tab-separated name and count.", f"TSV of author → commit count for {branch}, "
               f"last {n} {unit}, no merges.")
    ans = join(fence("bash", cmd), c.prose("The last awk moves the count after the name and keeps "
                                           "names with spaces intact (`$1 = \"\"` then strip the "
                                           "leading space)."))
    return record([msg("system", c.choice(SYSTEM)), msg("user", user), msg("assistant", ans)],
                  4, "syntax", "git_authors")


def k8s_pods(c):
    ns = c.choice(["payments", "search", "ingest", "default", "monitoring", "batch", "web", "ml",
                 "edge"])
    cmd = (f"kubectl get pods -n {ns} -o json \\\n  | jq -r '.items[] | select(.status.phase != "
           f"\"Running\") | [.metadata.name, .status.phase, (.status.containerStatuses // [] | "
           f"map(.restartCount) | add // 0)] | @tsv'")
    user = ask_any(c, f"List pods in namespace {ns} that aren't Running: name, phase, total "
               f"restarts, TSV.", f"kubectl + jq: non-Running pods in {ns} with their restart "
               f"counts, tab-separated.", f"Which {ns} pods are not Running? TSV with restarts.")
    ans = join(fence("bash", cmd), c.prose("`// []` and `// 0` cover pods that have no container "
                                           "statuses yet (Pending), where `add` would give null."))
    return record([msg("system", c.choice(SYSTEM)), msg("user", user), msg("assistant", ans)],
                  6, "reasoning", "k8s_pods")


from .shell_scripts import SCRIPT_TEMPLATES  # noqa: E402  (scripts need the helpers above)

# Pipelines' code is the idiom itself (an awk aggregation is the same awk in any record), so
# these families appear only in eval: they test pipelines of kinds training never showed.
HELD_OUT = {"pipelines": {"j_group", "top_ips", "k8s_pods"}}
SOURCES = {
    "pipelines": [(3, j_select), (3, j_tsv), (2, j_group), (2, awk_sum), (1.5, csv_json),
                  (1.5, top_ips), (2, safe_delete), (1.5, git_authors), (1.5, k8s_pods)],
    "scripts": SCRIPT_TEMPLATES,
}
