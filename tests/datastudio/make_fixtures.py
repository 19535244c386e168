"""Writes fixtures/*.json (the replay server's scripts) — run once by hand; the JSON is checked
in so that a test reads exactly what is reviewed: `python tests/datastudio/make_fixtures.py`."""
import json
from pathlib import Path

B = "```"


def sh(cmd, note=""):
    return f"{B}bash\n{cmd}\n{B}\n{note}".strip()


def vox(code, note=""):
    return f"{B}vox\n{code}\n{B}\n{note}".strip()


def call(name, args, note=""):
    return f"{note}\n<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>".strip()


def spoke_scripts(root, subs, leaves, repairs):
    """subs: root's subtopics; leaves: {label: reply}; repairs: [(token, [reply, ...])]."""
    s = [{"model": "*", "match": tok, "replies": replies} for tok, replies in repairs]
    s += [{"model": "*", "match": f"Topic: {label}", "replies": [reply]}
          for label, reply in leaves.items()]
    s += [{"model": "*", "match": f"Expand: {root}", "replies": [{"json": {"subtopics": subs}}]}]
    return s


def samples(*pairs):
    return {"json": {"samples": [{"prompt": p, "response": r} for p, r in pairs]}}


SHELL = spoke_scripts(
    "structured_shell", ["jq extraction", "safe deletes", "process listing"],
    {"jq extraction": samples(
        ("Print the name field of every object in items.json.",
         sh("jq -r '.[].name' items.json", "One name per line.")),
        ("Count objects in items.json as JSON.",
         sh("jq '{count: length}' items.json")),
        ("Show ids of active users in users.json.",
         sh("if then jq '.[] | select(.active) | .id' users.json fi", "BROKEN1 guard"))),
     "safe deletes": samples(
        ("Preview .tmp files older than 30 days under /data.",
         sh("find /data -type f -name '*.tmp' -mtime +30 -print")),
        ("Delete empty directories under /srv/cache safely.",
         sh("for d in $(find /srv/cache -type d -empty; do rmdir -- \"$d\"; done",
            "BROKEN2 loop")),
        ("Remove *.bak files in the current directory, listing them first.",
         sh("ls -- *.bak && rm -- *.bak )", "BROKEN3 paren"))),
     "process listing": {"content": "{\"samples\": [{\"prompt\": \"List processes as JSON\", "
                                    "\"response\": "}},
    [("BROKEN1", [{"json": {"response": sh(
        "jq '.[] | select(.active) | .id' users.json", "Ids of active users.")}}]),
     ("BROKEN3", [{"json": {"response": sh("ls -- *.bak && rm -- *.bak", "List, then remove.")}}]),
     ("BROKEN2", [{"json": {"response": sh("while ; do rmdir; done", "BROKEN2 still")}}])])

TOOLS = spoke_scripts(
    "mcp_tool_chain", ["weather lookups", "file search"],
    {"weather lookups": samples(
        ("What is the weather in Oslo in metric?",
         call("get_weather", {"city": "Oslo", "units": "metric"}, "Checking Oslo.")),
        ("Weather for Rome please.",
         call("get_weather", {"city": "R", "units": "kelvin"}, "BADCALL1 Checking."))),
     "file search": samples(
        ("Find the first 5 markdown files.",
         call("search_files", {"glob": "*.md", "limit": 5})),
        ("Read the README.", call("read_file", {"path": "README.md"})),
        ("", "an empty prompt: dropped by the schema check"))},
    [("BADCALL1", [{"json": {"response": call("get_weather", {"city": "Rome", "units": "metric"},
                                              "Checking Rome.")}}])])

VOX = spoke_scripts(
    "vox_lang", ["loops", "strings"],
    {"loops": samples(
        ("Print 1 to 3 in Vox.", vox("for i in range(1, 4) {\n    print(i);\n}")),
        ("Sum a list in Vox.", vox("let xs = [1, 2, 3];\nlet s = 0;\nfor x in xs {\n    "
                                   "s = s + x;\n}\nprint(s);"))),
     "strings": samples(
        ("Join two words in Vox.", vox("let = join([\"a\", \"b\"], \" \");", "BADVOX1")),
        ("Print the length of hello.", vox("print(len(\"hello\"));")))},
    [("BADVOX1", [{"content": "not json at all"},
                  {"json": {"response": vox("let w = join([\"a\", \"b\"], \" \");\nprint(w);")}}])])

out = Path(__file__).parent / "fixtures"
for name, scripts in (("structured_shell", SHELL), ("mcp_tool_chain", TOOLS), ("vox_lang", VOX)):
    (out / f"{name}.json").write_text(json.dumps({"scripts": scripts}, indent=1) + "\n")
