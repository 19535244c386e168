"""populi_mesh: an orchestrator agent routing, delegating and deciding among cooperating agents,
speaking in JSON messages {id, sender, recipients, reply_to, kind, body}. Tallies, quorums,
runoffs and dependency waves are computed, not asserted, so each decision is the right one."""
from __future__ import annotations

from collections import Counter

from .common import fence, join, jdump, msg, record

ROLES = {"coder": "writes and changes code", "reviewer": "reviews diffs",
         "tester": "writes and runs tests", "researcher": "reads docs and papers",
         "scribe": "writes release notes and docs", "auditor": "checks security and licences",
         "translator": "localises text", "deployer": "ships builds to environments",
         "analyst": "queries data and builds reports", "designer": "drafts UI mockups",
         "sre": "handles incidents and alerts", "planner": "breaks work into steps"}
ROLE_NAMES = sorted(ROLES)
SYSTEM = [
    "You are the orchestrator of a mesh of agents. Every message you send is JSON with id, "
    "sender, recipients, reply_to (the id it answers, or null) and kind/body. Route work to the "
    "agent whose skill fits, never reply to an unknown id, and keep reply chains acyclic.",
    "Mesh coordinator. Reply with a ```json list of messages (id, sender, recipients, reply_to, "
    "kind, body). Delegate by skill, tally votes exactly, and explain decisions in one line.",
    "You coordinate cooperating agents by message passing. Output JSON messages only inside "
    "```json fences; reference earlier messages by id in reply_to.",
]
TASKS = {"coder": ["add retry with backoff to the upload client", "fix the pagination bug in "
                   "/orders", "port the CSV exporter to streaming"],
         "reviewer": ["review PR 482 (auth refactor)", "second review on the cache eviction "
                      "change", "check the migration script diff"],
         "tester": ["write regression tests for the timezone fix", "run the load test on "
                    "staging", "add property tests for the parser"],
         "researcher": ["compare three rate-limiting algorithms", "summarise the CRDT paper for "
                        "the team", "find prior art for delta sync"],
         "scribe": ["draft release notes for 2.4", "document the new CLI flags", "write the "
                    "upgrade guide"],
         "auditor": ["check licences of new dependencies", "review the token storage for "
                     "leaks", "audit S3 bucket policies"],
         "translator": ["localise the onboarding screens into German", "translate error "
                        "messages to Spanish", "update the French glossary"],
         "deployer": ["ship build 311 to staging", "roll back prod to 2.3.9", "promote the "
                      "canary to 50%"],
         "analyst": ["weekly active users by platform", "churn report for Q3", "funnel drop-off "
                     "for the new checkout"],
         "designer": ["mock the settings page", "icons for the dark theme", "empty-state "
                      "illustrations"],
         "sre": ["page storm on the payments queue", "disk alert on db-2", "TLS cert expiring "
                 "on the edge"],
         "planner": ["split the billing migration into steps", "plan the data-center move",
                     "sequence the API v2 rollout"]}


STYLES = [lambda p, n: f"{p}{n}", lambda p, n: f"{p}-{n:03d}", lambda p, n: f"{p}:{n:02d}",
          lambda p, n: f"{p}{n}", lambda p, n: f"{p}_{n}", lambda p, n: f"{p}/{n}"]


def ids(c):
    """Message ids in one of several house styles (split-partitioned: eval threads are
    written in id styles no training thread uses)."""
    return c.pick(STYLES)


def M(i, sender, recipients, reply_to, kind, body):
    return {"id": i, "sender": sender, "recipients": recipients, "reply_to": reply_to,
            "kind": kind, "body": body}


def block(msgs) -> str:
    return fence("json", jdump(msgs if len(msgs) > 1 else msgs[0]))


def roster(c, need, k=4):
    others = [r for r in ROLE_NAMES if r not in need]
    names = list(dict.fromkeys(list(need) + c.rng.sample(others, max(0, k - len(need)))))
    c.rng.shuffle(names)
    return names, "Roster: " + "; ".join(f"{n} ({ROLES[n]})" for n in names)


def route(c):
    I = ids(c)
    role = c.choice(ROLE_NAMES)
    task = c.pick(TASKS[role])
    names, text = roster(c, [role], c.randint(3, 5))
    incoming = M(I("m", c.randint(1, 90)), c.choice(["user", "pm", "lead"]), ["orchestrator"],
                 None, "request", {"task": task})
    out = M(I("o", c.randint(100, 999)), "orchestrator", [role], incoming["id"], "delegate",
            {"task": task})
    why = c.pick([f"`{role}` {ROLES[role]}, which is what this needs.",
                  f"This is `{role}` work ({ROLES[role]}).", f"Routing to `{role}`: it "
                  f"{ROLES[role]}."])
    ans = join(c.prose(why), block([out]))
    return record([msg("system", c.choice(SYSTEM)), msg("user", f"{text}\n{block([incoming])}"),
                   msg("assistant", ans)], c.choice([1, 2]), "warmup", "route")


def fanout(c):
    I = ids(c)
    roles = c.rng.sample(ROLE_NAMES, c.randint(2, 4))
    names, text = roster(c, roles, len(roles) + 1)
    subs = {r: c.pick(TASKS[r]) for r in roles}
    goal = c.pick(["ship the 2.4 release", "prepare the quarterly review", "launch the German "
                   "market", "close the security audit", "migrate billing to the new provider",
                   "handle the payments outage", "finish the onboarding redesign",
                   "stand up the analytics pipeline", "cut over to API v2"])
    incoming = M(I("m", 1), "lead", ["orchestrator"], None, "request",
                 {"goal": goal, "subtasks": [subs[r] for r in roles]})
    out = [M(I("o", k + 2), "orchestrator", [r], incoming["id"], "delegate", {"task": subs[r]})
           for k, r in enumerate(roles)]
    ans = join(c.prose(c.pick([
        "One delegation per subtask, each to the agent with the matching skill, all replying to "
        "the request so results trace back to it.", "Each subtask goes to the agent whose skill "
        "matches; every delegation answers the request's id.", "Split by skill, one message per "
        "subtask, threaded under the original request."])), block(out))
    return record([msg("system", c.choice(SYSTEM)), msg("user", f"{text}\n{block([incoming])}"),
                   msg("assistant", ans)], 3 + len(roles) // 2, "syntax" if len(roles) < 3
                  else "reasoning", "fanout")


def collect(c, retry: bool = False):
    I = ids(c)
    roles = c.rng.sample(ROLE_NAMES, 3)
    subs = {r: c.pick(TASKS[r]) for r in roles}
    goal = c.pick(["the 2.4 release", "the audit", "the outage review", "the launch checklist",
                   "the migration", "the quarterly report", "the redesign", "the API rollout",
                   "the onboarding revamp"])
    req = M(I("m", 1), "lead", ["orchestrator"], None, "request", {"goal": goal})
    dels = [M(I("o", k + 2), "orchestrator", [r], req["id"], "delegate", {"task": subs[r]})
            for k, r in enumerate(roles)]
    failed = roles[1] if retry else None
    results = [M(I("r", k + 2), r, ["orchestrator"], dels[k]["id"], "error" if r == failed else
                 "result", {"status": "failed", "reason": "timed out after 30m"} if r == failed
                 else {"status": "done", "summary": f"{subs[r]}: done"})
               for k, r in enumerate(roles)]
    names, text = roster(c, roles + (["planner"] if retry else []), 5)
    msgs = [msg("system", c.choice(SYSTEM)), msg("user", f"{text}\n{block([req])}"),
            msg("assistant", block(dels)),
            msg("user", c.pick(["Replies so far:", "Incoming:", "Agents answered:"]) + "\n" +
                block(results))]
    if not retry:
        out = M(I("o", 9), "orchestrator", ["lead"], req["id"], "result",
                {"goal": goal, "done": [subs[r] for r in roles]})
        msgs.append(msg("assistant", join(c.prose(c.pick([
            "All three delegations answered; reporting back on the original request.",
            "Everything came back done, so the lead gets one summary threaded on the request.",
            "Three results in, none failed: closing the loop with the requester."])),
            block([out]))))
        return record(msgs, 6, "multi_turn", "collect")
    backup = next((r for r in names if r not in roles), "planner")
    k = roles.index(failed)
    again = M(I("o", 9), "orchestrator", [failed], results[k]["id"], "delegate",
              {"task": subs[failed], "attempt": 2, "timeout_minutes": 60})
    status = M(I("o", 10), "orchestrator", ["lead"], req["id"], "status",
               {"done": [subs[r] for r in roles if r != failed], "retrying": subs[failed]})
    msgs.append(msg("assistant", join(c.pick([
        f"`{failed}` timed out, so the task goes back to it with a longer timeout (`{backup}` "
        f"lacks the skill), and the lead gets a status.", f"Retrying `{failed}` with twice "
        f"the timeout — `{backup}` is no substitute for that skill — and telling the lead "
        f"where things stand.", f"A timeout is retryable: `{failed}` gets attempt 2 with "
        f"60 minutes; `{backup}` can't do it; the lead hears about the delay."]),
        block([again, status]))))
    return record(msgs, 8, "multi_turn", "collect_retry")


def waves(c):
    """Tasks with dependencies: delegate each wave only when its prerequisites are done."""
    I = ids(c)
    roles = c.rng.sample(ROLE_NAMES, 4)
    tasks = {r: c.pick(TASKS[r]) for r in roles}
    deps = {roles[0]: [], roles[1]: [roles[0]], roles[2]: [roles[0]], roles[3]: roles[1:3]}
    names, text = roster(c, roles, 5)
    plan = M(I("m", 1), "lead", ["orchestrator"], None, "request",
             {"tasks": [{"agent": r, "task": tasks[r], "after": deps[r]} for r in roles]})
    w1 = [M(I("o", 2), "orchestrator", [roles[0]], plan["id"], "delegate",
            {"task": tasks[roles[0]]})]
    done1 = M(I("r", 3), roles[0], ["orchestrator"], w1[0]["id"], "result", {"status": "done"})
    w2 = [M(I("o", k + 4), "orchestrator", [r], done1["id"], "delegate", {"task": tasks[r]})
          for k, r in enumerate(roles[1:3])]
    done2 = [M(I("r", k + 6), r, ["orchestrator"], w2[k]["id"], "result", {"status": "done"})
             for k, r in enumerate(roles[1:3])]
    w3 = [M(I("o", 8), "orchestrator", [roles[3]], done2[0]["id"], "delegate",
            {"task": tasks[roles[3]], "inputs_from": [d["id"] for d in done2]})]
    msgs = [msg("system", c.choice(SYSTEM)), msg("user", f"{text}\n{block([plan])}"),
            msg("assistant", join(c.pick([f"Only `{roles[0]}` has no prerequisites; the rest wait.",
                                          f"Wave 1 is `{roles[0]}` alone — everything else "
                                          f"depends on it.", f"`{roles[0]}` starts now; the "
                                          f"other three are blocked on it."]), block(w1))),
            msg("user", block([done1])),
            msg("assistant", join(f"`{roles[1]}` and `{roles[2]}` " + c.pick([
                "depended only on that: both start now, in parallel.", "are unblocked and run "
                "side by side.", "now have what they need; dispatching both."]), block(w2))),
            msg("user", block(done2)),
            msg("assistant", join(f"`{roles[3]}` " + c.pick([
                "has both prerequisites done; it gets both results as inputs.", "can start: "
                "its two inputs are in.", "was waiting on exactly these two, so it goes last."]),
                block(w3)))]
    return record(msgs, c.choice([8, 9]), "orchestration", "dependency_waves")


def tally(c, weighted: bool = False):
    I = ids(c)
    voters = c.rng.sample(ROLE_NAMES, c.randint(4, 6))
    quorum = len(voters) // 2 + 1
    opt = c.pick(["adopt Postgres 16", "freeze features for 2.4", "switch CI to arm64 runners",
                  "deprecate the v1 API", "move standup to async", "enable MFA for all staff",
                  "ship the dark theme", "drop Python 3.9", "rotate on-call weekly"])
    prop = M(I("p", 1), c.choice(voters), ["orchestrator"] + voters, None, "propose",
             {"motion": opt})
    cast = {v: c.choice(["yes", "no", "abstain"]) for v in voters}
    w = {v: c.randint(1, 3) for v in voters} if weighted else {v: 1 for v in voters}
    ballots = [M(I("v", k + 2), v, ["orchestrator"], prop["id"], "vote", {"choice": cast[v], **(
        {"weight": w[v]} if weighted else {})}) for k, v in enumerate(voters)]
    present = [v for v in voters if cast[v] != "abstain"]
    yes = sum(w[v] for v in voters if cast[v] == "yes")
    no = sum(w[v] for v in voters if cast[v] == "no")
    met = len(present) >= quorum
    result = ("accepted" if yes > no else "rejected" if no > yes else "tied") if met else "no_quorum"
    body = {"yes": yes, "no": no, "abstain": len(voters) - len(present), "motion": opt,
            "quorum": quorum, "quorum_met": met, "result": result}   # motion mid-way: see ids()
    dec = M(I("d", 1), "orchestrator", voters, prop["id"], "decision", body)
    wt = "weighted " if weighted else ""
    why = (c.pick([f"{len(present)} of {len(voters)} voted (quorum {quorum}): ",
                   f"Turnout {len(present)}/{len(voters)}, quorum is {quorum}; ",
                   f"Quorum {quorum}, ballots cast {len(present)} (of {len(voters)}): "]) +
           (c.pick([f"{wt}yes {yes} vs no {no} → {result}.", f"{wt}tally {yes} for, {no} "
                    f"against, so the motion is {result}.", f"result {result} ({wt}{yes}–{no})."])
            if met else
            c.pick(["quorum not met, so no decision; abstentions do not count toward quorum.",
                    "too few ballots to decide — an abstention is not a vote for quorum.",
                    "below quorum; asking the abstainers to vote before anything is decided."])))
    out = [dec] + ([M(I("d", 2), "orchestrator", [v for v in voters if cast[v] == "abstain"],
                      prop["id"], "ask", {"please_vote_on": prop["id"]})] if not met else [])
    msgs = [msg("system", c.choice(SYSTEM)),
            msg("user", c.pick(["Proposal and ballots:", "Votes are in:", "Tally this:"]) +
                "\n" + block([prop] + ballots)),
            msg("assistant", join(why, block(out)))]
    return record(msgs, 5 + weighted if met else 6 + weighted, "reasoning",
                  "tally_weighted" if weighted else "tally")


def runoff(c):
    I = ids(c)
    voters = c.rng.sample(ROLE_NAMES, 5)
    opts = c.rng.sample(c.part(["Rust", "Go", "Kotlin", "Zig", "Elixir", "TypeScript", "OCaml",
                                "Swift", "Scala"]), 3)
    topic = c.pick(["language for the new ingest service", "stack for the CLI rewrite",
                    "language for the edge workers", "runtime for the plugin host",
                    "language for the sync daemon", "tooling language for the build system"])
    r1 = {v: c.choice(opts) for v in voters}
    counts = Counter(r1.values())
    if max(counts.values()) > len(voters) // 2 or len(counts) < 3:
        return runoff(c)                       # runoff only makes sense without a majority
    low = min(opts, key=lambda o: (counts[o], o))
    keep = [o for o in opts if o != low]
    prop = M(I("p", 1), "planner" if "planner" in voters else voters[0], ["orchestrator"], None,
             "propose", {"topic": topic, "options": opts})
    b1 = [M(I("v", k + 2), v, ["orchestrator"], prop["id"], "vote", {"choice": r1[v]})
          for k, v in enumerate(voters)]
    r2 = {v: (r1[v] if r1[v] in keep else c.choice(keep)) for v in voters}
    c2 = Counter(r2.values())
    win = max(keep, key=lambda o: (c2[o], -keep.index(o)))
    ask = M(I("o", 1), "orchestrator", voters, prop["id"], "runoff",
            {"eliminated": low, "options": keep, "round": 2})
    b2 = [M(I("w", k + 2), v, ["orchestrator"], ask["id"], "vote", {"choice": r2[v]})
          for k, v in enumerate(voters)]
    dec = M(I("d", 1), "orchestrator", voters, ask["id"], "decision",
            {"topic": topic, "winner": win, "round2": dict(sorted(c2.items()))})
    msgs = [msg("system", c.choice(SYSTEM)), msg("user", block([prop] + b1)),
            msg("assistant", join(f"No majority ({', '.join(f'{o} {counts[o]}' for o in opts)}); "
                                  + c.pick([f"dropping the last-placed {low} and running round 2.",
                                            f"{low} is eliminated; second round between the "
                                            f"other two.", f"runoff without {low}."]),
                                  block([ask]))),
            msg("user", block(b2)),
            msg("assistant", join(f"Round 2: {', '.join(f'{o} {c2[o]}' for o in keep)} → "
                                  f"{win}.", block([dec])))]
    return record(msgs, c.choice([8, 9]), "orchestration", "runoff")


def repair_thread(c):
    """Agentic: some incoming messages are malformed; flag them, ask for resends, proceed."""
    I = ids(c)
    voters = c.rng.sample(ROLE_NAMES, 4)
    bad = voters[1]
    motion = c.pick(["merge the release branch", "raise the error budget", "pin the base "
                     "image", "archive the old wiki", "switch to trunk-based", "cap PR size",
                     "adopt semantic versioning", "retire the staging cluster", "move to UTC"])
    prop = M(I("p", 1), voters[0], ["orchestrator"], None, "propose", {"motion": motion})
    ghost = I("p", 9)
    ballots = [M(I("v", k + 2), v, ["orchestrator"], ghost if v == bad else prop["id"], "vote",
                 {"choice": c.choice(["yes", "no"])}) for k, v in enumerate(voters)]
    good = [b for b in ballots if b["reply_to"] == prop["id"]]
    ask = M(I("o", 1), "orchestrator", [bad], ballots[1]["id"], "ask",
            {"problem": f"reply_to {ghost} names no known message",
             "please_resend_for": prop["id"]})
    resend = M(I("v", 7), bad, ["orchestrator"], prop["id"], "vote", {"choice": "yes"})
    allv = good + [resend]
    yes = sum(b["body"]["choice"] == "yes" for b in allv)
    dec = M(I("d", 1), "orchestrator", voters, prop["id"], "decision",
            {"motion": motion, "yes": yes, "no": len(allv) - yes,
             "result": "accepted" if yes * 2 > len(allv) else "rejected" if yes * 2 < len(allv)
             else "tied"})
    msgs = [msg("system", c.choice(SYSTEM)), msg("user", block([prop] + ballots)),
            msg("assistant", join(f"`{bad}`'s ballot answers {ghost}, " + c.pick([
                "which does not exist; counting it would attach a vote to nothing, so I ask "
                "for a resend before deciding.", "an id nobody sent. I won't guess what it "
                "meant: asking for the vote again first.", "a dangling reference — the vote "
                "can't be counted until it is re-sent against the proposal."]), block([ask]))),
            msg("user", block([resend])),
            msg("assistant", join(f"All {len(allv)} ballots now answer {prop['id']}: yes {yes}, "
                                  f"no {len(allv) - yes}.", block([dec])))]
    return record(msgs, 10, "agentic", "repair_thread")


SOURCES = {
    "delegations": [(2, route), (2.5, fanout), (2, collect), (1.5, lambda c: collect(c, True)),
                    (2, waves)],
    "consensus": [(3, tally), (2, lambda c: tally(c, True)), (2.5, runoff), (2.5, repair_thread)],
}
