// mens studio: the Serve panel's side-by-side chat (app.js holds the helpers and the rest of
// the panel). The same prompt to A and B; with tools, each answer's calls are listed under it.
"use strict";
// Tool calls: an answer's calls are listed under it, each with a box for the tool's result;
// "send results" continues that side's conversation (/api/serve/turn) with `tool` messages.
function chatTools() {
  const t = $("#chat-tools").value.trim();
  return t ? JSON.parse(t) : null;   // a SyntaxError is shown where the answers go
}
// an answer as text: its content, then one line per call it makes
const transcript = a => [a.text, ...a.tool_calls.map(c => `→ ${c.name}(${c.arguments})`)].filter(Boolean).join("\n");
function showAnswer(side, a, tools, before = "") {
  const pre = $("#answer-" + side), box = $("#calls-" + side);
  pre.textContent = (before ? before + "\n" : "") + transcript(a); box.replaceChildren();
  if (!a.tool_calls.length) return;
  const results = a.tool_calls.map(c => el("textarea", { rows: 2, cols: 50, class: "tool-result", "data-call": c.id, "aria-label": "result of " + c.name }));
  a.tool_calls.forEach((c, i) => box.append(el("div", { class: "call" },
    el("code", {}, `${c.name}(${c.arguments})`), el("br"), el("label", {}, "tool result ", results[i]))));
  const send = el("button", { class: "send-results" }, "send results");
  const msg = el("span", { class: "turn-msg", role: "status" });
  send.addEventListener("click", async () => {
    const messages = [...a.messages, ...a.tool_calls.map((c, i) => ({ role: "tool", tool_call_id: c.id, name: c.name, content: results[i].value }))];
    msg.textContent = "asking…";
    try {
      const next = await api("/api/serve/turn", { model: a.model, messages, tools });
      msg.textContent = "";
      const sent = a.tool_calls.map((c, i) => `⟵ ${c.name}: ${results[i].value}`).join("\n");
      showAnswer(side, next, tools, pre.textContent + "\n" + sent);
    } catch (e) { msg.textContent = e.message; }
  });
  box.append(send, " ", msg);
}
$("#chat-ask").addEventListener("click", async () => {
  $("#chat-differ").textContent = "asking…"; $("#answer-a").textContent = $("#answer-b").textContent = "";
  $("#calls-a").replaceChildren(); $("#calls-b").replaceChildren();
  try {
    const tools = chatTools();
    const r = await api("/api/serve/chat", { prompt: $("#chat-prompt").value, a: $("#chat-a").value, b: $("#chat-b").value, ...(tools ? { tools } : {}) });
    $("#answer-a-model").textContent = r.answers[0].model; showAnswer("a", r.answers[0], tools);
    $("#answer-b-model").textContent = r.answers[1].model; showAnswer("b", r.answers[1], tools);
    $("#chat-differ").textContent = r.differ ? "the answers differ" : "the answers are the same";
  } catch (e) { $("#chat-differ").textContent = e.message; }
});
