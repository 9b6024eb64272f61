// grm view: a sample's multi-turn episode (the server's `episode`, grm/view/episode.py) as a
// conversation: the task, then each turn with its tool calls and observations, which tokens were
// trained on, how it ended, its signals and per-turn credit. Loaded before app.js; its helpers (el,
// pill, fmt) are looked up when these functions run. Every text here is model or tool output: it
// enters the page through el() as text nodes, never as HTML.
"use strict";

function maskLegend(ep) {
  return el("div", { class: "mask-legend" },
    el("span", {}, el("i", { class: "swatch policy" }), `policy tokens, trained on (loss mask 1): ${ep.policy_tokens}`),
    el("span", {}, el("i", { class: "swatch ctx" }), `context, masked out of the loss (prompt, observations, template): ${ep.context_tokens}`));
}

function turnPills(t, faulty) {
  const tool = t.role === "tool";
  const has = (x) => x !== null && x !== undefined;
  return [
    pill(`${t.trained ? "trained" : "context"} · ${t.tokens} token${t.tokens === 1 ? "" : "s"}`, t.trained ? "policy" : "ctx"),
    has(t.policy_version) ? pill("policy v" + t.policy_version) : null,
    has(t.mean_logprob) ? pill("mean log-prob " + fmt(t.mean_logprob)) : null,
    t.finish_reason === "length" ? pill("cut at max tokens", "warn") : null,
    tool && t.ok ? pill("ok", "good") : null,
    !t.ok ? pill("error: " + (t.error || "failed"), "bad") : null,
    t.cut ? pill("output cut by the sandbox", "warn") : null,
    t.cut_for_view ? pill("cut for this page", "warn") : null,
    tool && t.seconds ? pill(fmt(t.seconds) + " s") : null,
    has(t.credit) ? pill("credit " + fmt(t.credit), t.credit > 0 ? "good" : t.credit < 0 ? "bad" : null) : null,
    faulty.length ? pill("first faulty turn: " + faulty.join(", "), "bad") : null,
  ];
}

function turnCard(t, faulty) {
  const who = `turn ${t.index + 1} · ${t.role}` + (t.tool_name ? ` · ${t.tool_name}` : "") + (t.tool_call_id ? ` (${t.tool_call_id})` : "");
  const card = el("div", {
    class: "turn " + (t.trained ? "policy" : "ctx") + (faulty.length ? " faulty" : ""),
    "data-turn": t.index, "data-role": t.role, "data-trained": t.trained ? "1" : "0",
  }, el("div", { class: "turn-head" }, el("b", {}, who), turnPills(t, faulty)));
  if (t.content) card.appendChild(el("pre", { class: "turn-text" }, t.content));
  for (const c of t.tool_calls) {
    card.appendChild(el("div", { class: "call" },
      el("div", { class: "meta" }, "tool call ", el("code", {}, c.name), c.id ? " · " + c.id : "", c.cut_for_view ? " · arguments cut for this page" : ""),
      el("pre", { class: "args" }, c.arguments)));
  }
  if (t.tool_call_error) card.appendChild(el("div", { class: "err" }, "malformed tool call: " + t.tool_call_error));
  return card;
}

// ep: the server's episode view; judges: the row's judges (a process judge names a first faulty turn).
function episodeBlock(ep, judges) {
  const faulty = {};
  for (const [name, j] of Object.entries(judges || {})) {
    if (j && Number.isInteger(j.faulty_turn)) (faulty[j.faulty_turn] = faulty[j.faulty_turn] || []).push(name);
  }
  const box = el("div", { class: "episode", "data-episode": ep.id });
  box.appendChild(el("div", { class: "nums" },
    el("span", { class: "label" }, "episode"),
    pill("end: " + (ep.end_reason || "still running"), ep.end_reason === "done" ? "good" : "warn"),
    pill(`${ep.turns_total} turns`),
    ep.first_version !== null && ep.first_version !== undefined ? pill("from policy v" + ep.first_version) : null));
  if (ep.end_detail) box.appendChild(el("div", { class: "muted end-detail" }, ep.end_detail));
  box.appendChild(maskLegend(ep));
  if (ep.mask_problem) box.appendChild(el("div", { class: "err" }, "the trainer cannot build this episode's loss mask: " + ep.mask_problem));
  const convo = el("div", { class: "convo" });
  ep.task.forEach((m, i) => convo.appendChild(el("div", { class: "turn ctx task", "data-role": m.role },
    el("div", { class: "turn-head" }, el("b", {}, "task · " + m.role),
      i === 0 ? pill(`prompt · ${ep.prompt_tokens} tokens`, "ctx") : null,
      m.cut_for_view ? pill("cut for this page", "warn") : null),
    el("pre", { class: "turn-text" }, m.content))));
  if (ep.task_total > ep.task.length) convo.appendChild(el("div", { class: "note" }, `the first ${ep.task.length} of ${ep.task_total} task messages are shown`));
  if (ep.tools.length) convo.appendChild(el("div", { class: "meta" }, "tools offered: " + ep.tools.join(", ")));
  for (const t of ep.turns) convo.appendChild(turnCard(t, faulty[t.index] || []));
  if (ep.turns_total > ep.turns.length) convo.appendChild(el("div", { class: "note" }, `the first ${ep.turns.length} of ${ep.turns_total} turns are shown`));
  box.appendChild(el("details", { open: true }, el("summary", { class: "label" }, "conversation"), convo));
  const signals = Object.entries(ep.signals || {});
  box.appendChild(el("div", { class: "nums signals" },
    el("span", { class: "label" }, "signals"),
    signals.length ? signals.map(([k, v]) => pill(`${k} ${fmt(v)}`)) : el("span", { class: "muted" }, "none"),
    ep.signals_total > signals.length ? el("span", { class: "muted" }, `(${signals.length} of ${ep.signals_total})`) : null));
  return box;
}
