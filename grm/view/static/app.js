// grm view: vanilla JS over the JSON API of grm/view/server.py. Every text from the files (prompts,
// responses, critiques: untrusted model output) enters the page through text nodes, never as HTML.
"use strict";

const PALETTE = ["#3559e0", "#e0663a", "#1f9d55", "#a23bd6", "#d6a100", "#0f9fb5", "#d64585", "#6b7385", "#7a5c2e", "#2e7a6b"];
const state = { dirs: [], tab: null, params: {}, timer: null };

// ------------------------------------------------------------------ helpers

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "class") node.className = v;
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function fmt(x, digits = 3) {
  if (x === null || x === undefined) return "–";
  if (typeof x === "number") {
    if (!isFinite(x)) return "–";
    if (Number.isInteger(x) && Math.abs(x) < 1e6) return String(x);
    const a = Math.abs(x);
    if (a !== 0 && (a < 1e-3 || a >= 1e5)) return x.toExponential(2);
    return x.toFixed(digits).replace(/\.?0+$/, "") || "0";
  }
  if (Array.isArray(x)) return "[" + x.map((v) => fmt(v)).join(", ") + "]";
  if (typeof x === "object") return JSON.stringify(x);
  return String(x);
}

async function api(path) {
  const r = await fetch(path, { cache: "no-store" });
  const ctype = r.headers.get("Content-Type") || "";
  const body = ctype.startsWith("application/json") ? await r.json() : await r.text();
  if (!r.ok) throw new Error((body && body.error) || r.statusText);
  return body;
}

// What the server could not read from a directory (links, FIFOs, bad rows): listed, never hidden.
function badData(body, lines, total, what) {
  if (!lines || !lines.length) return;
  const more = total > lines.length ? ` (the first ${lines.length} of ${total})` : "";
  body.appendChild(el("div", { class: "note bad-data" }, el("b", {}, what + more), el("ul", {}, lines.map((t) => el("li", {}, t)))));
}

function pill(text, kind) { return el("span", { class: "pill" + (kind ? " " + kind : "") }, text); }
function stat(k, v, ci) { return el("div", { class: "stat" }, el("div", { class: "k" }, k), el("div", { class: "v" }, v), ci ? el("div", { class: "ci" }, ci) : null); }
function select(options, value, onchange, labels) {
  const s = el("select", { onchange: (e) => onchange(e.target.value) });
  options.forEach((o, i) => s.appendChild(el("option", { value: o, selected: String(o) === String(value) }, labels ? labels[i] : o)));
  return s;
}

// ------------------------------------------------------------------ routing (state in the URL hash)

function readHash() {
  const p = new URLSearchParams(location.hash.slice(1));
  state.params = Object.fromEntries(p.entries());
  state.tab = p.get("d") || "0";
}
function go(params) {
  const p = new URLSearchParams({ ...state.params, ...params });
  for (const [k, v] of [...p.entries()]) if (v === "" || v === "undefined") p.delete(k);
  location.hash = p.toString();
}

function renderTabs() {
  const nav = document.getElementById("tabs");
  nav.replaceChildren();
  const add = (id, kind, name) => nav.appendChild(el("a", { href: "#d=" + id, class: state.tab === id ? "active" : null }, el("span", { class: "kind" }, kind), name));
  state.dirs.forEach((d) => add(String(d.id), d.kind, d.name));
  if (state.dirs.filter((d) => d.kind === "run").length > 1) add("runs", "compare", "runs");
  if (state.dirs.filter((d) => d.kind === "eval").length > 1) add("evals", "compare", "evals");
}

async function render() {
  readHash();
  renderTabs();
  const main = document.getElementById("main");
  const body = el("div");
  try {
    if (state.tab === "runs") await renderRunCompare(body);
    else if (state.tab === "evals") await renderEvalCompare(body);
    else {
      const d = state.dirs[Number(state.tab)];
      if (!d) throw new Error("no directory " + state.tab);
      if (d.kind === "run") await renderRun(body, d);
      else await renderEval(body, d);
    }
  } catch (e) {
    body.appendChild(el("p", { class: "err" }, "error: " + e.message));
  }
  const y = window.scrollY;
  main.replaceChildren(body);
  window.scrollTo(0, y);
  document.body.dataset.ready = "1";
}

// ------------------------------------------------------------------ charts

function niceTicks(lo, hi, n) {
  if (lo === hi) { lo -= 1; hi += 1; }
  const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toPrecision(12));
  return out;
}

// series: [{label, points: [[x, y], ...]}]; y null leaves a gap.
function lineChart(title, series) {
  const W = 420, H = 190, L = 46, R = 10, T = 8, B = 24;
  const pts = series.flatMap((s) => s.points.filter((p) => p[1] !== null && p[1] !== undefined));
  const box = el("div", { class: "chart", "data-chart": title });
  box.appendChild(el("h3", {}, title));
  if (!pts.length) { box.appendChild(el("p", { class: "muted" }, "no values yet")); return box; }
  const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
  let x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { if (y0 === 0) y1 = 1; else { y0 -= Math.abs(y0) / 2; y1 += Math.abs(y1) / 2; } }
  const yt = niceTicks(y0, y1, 4);
  y0 = Math.min(y0, yt[0]); y1 = Math.max(y1, yt[yt.length - 1]);
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const sy = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
  const g = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img" });
  for (const t of yt) {
    g.appendChild(svg("line", { class: "grid", x1: L, x2: W - R, y1: sy(t), y2: sy(t) }));
    g.appendChild(svg("text", { x: L - 5, y: sy(t) + 3, "text-anchor": "end" }, fmt(t, 3)));
  }
  const xt = niceTicks(x0, x1, Math.min(6, Math.max(1, x1 - x0))).filter((t) => Number.isInteger(t));
  for (const t of xt) g.appendChild(svg("text", { x: sx(t), y: H - 8, "text-anchor": "middle" }, t));
  g.appendChild(svg("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }));
  g.appendChild(svg("line", { class: "axis", x1: L, x2: L, y1: T, y2: H - B }));
  const legend = el("div", { class: "legend" });
  series.forEach((s, i) => {
    const color = PALETTE[i % PALETTE.length];
    let d = "", pen = false;
    for (const [x, y] of s.points) {
      if (y === null || y === undefined) { pen = false; continue; }
      d += (pen ? "L" : "M") + sx(x).toFixed(1) + "," + sy(y).toFixed(1);
      pen = true;
    }
    g.appendChild(svg("path", { d, fill: "none", stroke: color, "stroke-width": 2, "stroke-linejoin": "round" }));
    for (const [x, y] of s.points) {
      if (y === null || y === undefined) continue;
      g.appendChild(svg("circle", { cx: sx(x), cy: sy(y), r: 2.8, fill: color }, svg("title", {}, `${s.label} @ step ${x}: ${fmt(y, 4)}`)));
    }
    legend.appendChild(el("span", {}, el("i", { style: "background:" + color }), s.label));
  });
  box.appendChild(g);
  box.appendChild(legend);
  return box;
}

// The curves everyone looks at first; every other numeric key is under "all metrics", by prefix.
const MAIN_CHARTS = [
  ["rewards (mean and per judge)", (k) => k === "reward_mean" || k.startsWith("reward/")],
  ["KL to the reference", (k) => k === "kl" || k.startsWith("kl/") || k.startsWith("kl_")],
  ["response length (tokens)", (k) => k === "response_len_mean"],
  ["masked samples", (k) => k === "masked" || k.startsWith("masked_by_judge/")],
  ["seconds per phase", (k) => k.startsWith("seconds_") && !k.includes("/")],
  ["judges' share of step time", (k) => k === "judge_share"],
];

function chartsFor(runs) {
  // runs: [{name, metrics: {rows, groups}}]; several runs overlay their series.
  const keys = [...new Set(runs.flatMap((r) => Object.values(r.metrics.groups).flat()))];
  const series = (ks) => runs.flatMap((r) => ks.map((k) => ({
    label: (runs.length > 1 ? r.name + ": " : "") + k,
    points: r.metrics.rows.map((row) => [row.step, row[k] === undefined ? null : row[k]]),
  })).filter((s) => s.points.some((p) => p[1] !== null)));  // a key another run has, this one not
  const main = el("div", { class: "charts" });
  for (const [title, pick] of MAIN_CHARTS) {
    const ks = keys.filter(pick);
    if (ks.length) main.appendChild(lineChart(title, series(ks)));
  }
  const groups = {};
  for (const r of runs) for (const [g, ks] of Object.entries(r.metrics.groups)) groups[g] = [...new Set([...(groups[g] || []), ...ks])];
  const all = el("div", { class: "charts" });
  for (const g of Object.keys(groups).sort()) all.appendChild(lineChart(g, series(groups[g])));
  return el("div", {}, main, el("details", { class: "more" }, el("summary", {}, `all metrics (${keys.length} keys in ${Object.keys(groups).length} groups)`), all));
}

// ------------------------------------------------------------------ run

async function renderRun(body, d) {
  const [info, metrics] = await Promise.all([api(`/api/d/${d.id}/info`), api(`/api/d/${d.id}/metrics`)]);
  body.appendChild(el("div", { class: "path" }, info.path));
  badData(body, info.problems, 0, "not shown from this directory");
  badData(body, metrics.bad_rows, metrics.bad_rows_total, `${metrics.bad_rows_total} bad rows in metrics.jsonl, not plotted`);
  const last = metrics.rows[metrics.rows.length - 1];
  if (state.params.only === "samples") {  // #d=N&only=samples: the sample browser alone
    await renderSamples(body, d, info.steps);
    return;
  }
  if (metrics.gate && metrics.gate.length) {  // gate.json: each judge measured on labelled pairs before training
    body.appendChild(el("h2", { id: "gate" }, "judge gate", el("span", { class: "sub" }, "accuracy on labelled pairs before the policy loaded")));
    const cards = el("div", { class: "cards" });
    for (const g of metrics.gate) {
      cards.appendChild(stat(`${g.judge} ${g.passed ? "passed" : "FAILED"}`, fmt(g.accuracy), `95% CI ${fmt(g.ci95)}; bar ${fmt(g.min_accuracy)}; ${fmt(g.pairs)} pairs`));
    }
    body.appendChild(cards);
  }
  if (last) {
    body.appendChild(el("h2", {}, "last step", el("span", { class: "sub" }, `step ${fmt(last.step)} of what metrics.jsonl holds so far`)));
    const cards = el("div", { class: "cards" });
    for (const [k, label] of [["reward_mean", "reward"], ["reward_std", "reward std"], ["kl", "KL"], ["masked", "masked"], ["response_len_mean", "length"], ["seconds_step", "seconds / step"], ["judge_share", "judges' share"]]) {
      if (last[k] !== undefined) cards.appendChild(stat(label, fmt(last[k])));
    }
    body.appendChild(cards);
    body.appendChild(el("h2", { id: "curves" }, "curves", el("span", { class: "sub" }, `${metrics.rows_total} steps`)));
    if (metrics.note) body.appendChild(el("div", { class: "note" }, metrics.note));  // a long run's curves are thinned
    body.appendChild(chartsFor([{ name: d.name, metrics }]));
  } else {
    body.appendChild(el("p", { class: "muted" }, "no step logged yet (metrics.jsonl is empty); tick 'live' to follow the run"));
  }
  await renderSamples(body, d, info.steps);
  renderFiles(body, d, info.files);
}

async function renderSamples(body, d, steps) {
  body.appendChild(el("h2", { id: "samples" }, "samples", el("span", { class: "sub" }, "each prompt's group side by side, with every judge's critiques")));
  if (!steps.length) { body.appendChild(el("p", { class: "muted" }, "samples.jsonl has no rows yet")); return; }
  const p = state.params;
  const step = p.step && steps.includes(Number(p.step)) ? Number(p.step) : steps[steps.length - 1];
  const sort = p.sort || "reward", desc = p.desc || "1", filter = p.filter || "all", page = Number(p.page || 0), diffs = p.diffs === "1";
  const data = await api(`/api/d/${d.id}/samples?step=${step}&sort=${sort}&desc=${desc}&filter=${filter}&page=${page}`);
  const pages = Math.max(1, data.pages);  // a page holds at most per_page groups and rows_per_page rows
  body.appendChild(el("div", { class: "toolbar" },
    el("label", {}, "step "), select(steps, step, (v) => go({ step: v, page: 0 })),
    el("label", {}, "sort by "), select(["reward", "advantage", "length", "masked"], sort, (v) => go({ sort: v, page: 0 })),
    select(["1", "0"], desc, (v) => go({ desc: v, page: 0 }), ["high first", "low first"]),
    el("label", {}, "show "), select(["all", "masked", "unmasked", "positive", "negative", "truncated"], filter, (v) => go({ filter: v, page: 0 }),
      ["all", "masked", "not masked", "advantage > 0", "advantage < 0", "cut at max tokens"]),
    el("label", {}, el("input", { type: "checkbox", checked: diffs, onchange: (e) => go({ diffs: e.target.checked ? "1" : "" }) }), " diffs open"),
    el("span", { class: "muted" }, `${data.rows} responses, ${data.groups_total} groups shown`),
    el("span", { class: "pager" },
      el("button", { type: "button", disabled: page <= 0, onclick: () => go({ page: page - 1 }) }, "‹ prev"),
      `page ${page + 1} / ${pages}`,
      el("button", { type: "button", disabled: page + 1 >= pages, onclick: () => go({ page: page + 1 }) }, "next ›"))));
  if (data.note) body.appendChild(el("div", { class: "note" }, data.note));
  badData(body, data.bad_rows, data.bad_rows_total, `${data.bad_rows_total} bad rows in step ${step}`);
  for (const g of data.groups) body.appendChild(groupCard(g, diffs));
}

function groupCard(g, diffs) {
  const side = el("div", { class: "side" + (g.rows.some((r) => r.episode) ? " episodes" : "") });
  for (const r of g.rows) side.appendChild(responseCard(r, diffs));
  // a group larger than a page is split across pages: say which of its rows this page shows
  const part = g.first > 0 || g.rows.length < g.kept ? ` · ${g.first + 1}–${g.first + g.rows.length} of ${g.kept} shown` : "";
  return el("div", { class: "group" },
    el("div", { class: "prompt" }, el("div", { class: "label" }, `prompt · group ${g.group} · ${g.size} responses${part}`), el("pre", {}, g.prompt || "")),
    side);
}

function responseCard(r, diffs) {
  const masked = r.masked_reasons.length > 0;
  const nums = el("div", { class: "nums" },
    pill("reward " + fmt(r.reward), r.reward === null ? "bad" : "accent"),
    pill("advantage " + fmt(r.advantage), r.advantage > 0 ? "good" : r.advantage < 0 ? "bad" : null),
    pill(r.length + " chars"),
    r.finish_reason === "length" ? pill("cut at max tokens", "warn") : null,
    r.best ? pill("best of group", "good") : null,
    r.reward_before_length_control !== undefined ? pill("before length control " + fmt(r.reward_before_length_control)) : null);
  const card = el("div", { class: "resp" + (r.best ? " best" : "") + (masked ? " masked" : ""), "data-sample": r.id },
    nums,
    masked ? el("div", { class: "err" }, r.masked_reasons.join("; ")) : null,
    el("div", {}, el("div", { class: "label" }, r.episode ? "final answer" : "response"), el("pre", {}, r.response || "")),
    r.episode ? episodeBlock(r.episode, r.judges) : null);  // episode.js
  if (r.diff) {
    const pre = el("pre", {});
    for (const [op, text] of r.diff) pre.appendChild(op === "equal" ? document.createTextNode(text) : el(op === "insert" ? "ins" : "del", {}, text));
    card.appendChild(el("details", { open: diffs }, el("summary", { class: "label" }, "diff against the group's best"), pre));
  } else if (r.diff_skipped) {
    card.appendChild(el("div", { class: "muted" }, "diff against the group's best: " + r.diff_skipped));
  }
  for (const [name, j] of Object.entries(r.judges || {})) card.appendChild(judgeBlock(name, j));
  return card;
}

function judgeBlock(name, j) {
  if (!j) return el("div", { class: "judge" }, el("b", {}, name), " ", pill("no result", "bad"));
  const summary = el("summary", {}, name, pill("score " + fmt(j.score)), pill("reward " + fmt(j.reward), j.masked ? "bad" : "accent"), j.masked ? pill("masked", "bad") : null,
    Number.isInteger(j.faulty_turn) ? pill("first faulty turn " + (j.faulty_turn + 1), "warn") : j.faulty_turn === "none" ? pill("no faulty turn", "good") : null);
  const block = el("details", { class: "judge", open: true }, summary);
  (j.critiques || []).forEach((c, i) => {
    block.appendChild(el("div", { class: "crit" },
      el("div", { class: "meta" }, `critique ${i + 1} · parsed ${fmt((j.parsed || [])[i])}`),
      el("pre", { class: "critique" }, c || "")));
  });
  for (const extra of ["comparisons", "checklist"]) {
    if (j[extra]) block.appendChild(el("details", {}, el("summary", { class: "meta" }, extra), el("pre", {}, JSON.stringify(j[extra], null, 1))));
  }
  return block;
}

function renderFiles(body, d, files) {
  body.appendChild(el("h2", {}, "files"));
  const out = el("div");
  const list = el("div", { class: "files" });
  for (const f of files) {
    if (f.text) list.appendChild(el("a", { onclick: async () => out.replaceChildren(el("pre", { style: "max-height:600px" }, await api(`/api/d/${d.id}/file?name=${encodeURIComponent(f.name)}`))) }, f.name));
    else list.appendChild(el("span", { class: "muted", style: "margin-right:14px;font-size:12.5px" }, f.name + (f.entries ? ` (${f.entries.join(", ")})` : "") + (f.note ? ` (${f.note})` : "")));
  }
  body.appendChild(list);
  body.appendChild(out);
}

async function renderRunCompare(body) {
  const runs = state.dirs.filter((d) => d.kind === "run");
  const ms = await Promise.all(runs.map((d) => api(`/api/d/${d.id}/metrics`)));
  body.appendChild(el("h2", {}, "runs side by side", el("span", { class: "sub" }, runs.map((r) => r.name).join(" · "))));
  body.appendChild(chartsFor(runs.map((d, i) => ({ name: d.name, metrics: ms[i] }))));
}

// ------------------------------------------------------------------ eval

const PAIR_METRICS = [
  ["accuracy_average", "accuracy (mean of orders)", "accuracy_average_ci95"],
  ["accuracy_swap_combined", "accuracy (both orders combined)", "accuracy_swap_combined_ci95"],
  ["accuracy_order1", "accuracy, order 1"],
  ["accuracy_order2", "accuracy, order 2"],
  ["positional_agreement", "positional agreement"],
  ["tie_rate", "ties"],
  ["first_position_win_rate", "first position wins"],
];

function flatten(obj, prefix, out) {
  for (const [k, v] of Object.entries(obj || {})) {
    const key = prefix ? prefix + "." + k : k;
    if (v && typeof v === "object" && !Array.isArray(v)) flatten(v, key, out);
    else out.push([key, v]);
  }
  return out;
}

function confusionTable(title, c) {
  const max = Math.max(1, ...c.rows.flat());
  const t = el("table", { class: "grid" }, el("tr", {}, el("th", {}, "label \\ judge"), c.columns.map((x) => el("th", {}, x))));
  c.rows.forEach((row, i) => t.appendChild(el("tr", {}, el("th", {}, "human: " + (i + 1)),
    row.map((n, j) => el("td", { style: `background: rgba(53,89,224,${(0.75 * n) / max}); color: ${n / max > 0.55 ? "#fff" : "inherit"}`, title: `label ${i + 1}, judge ${c.columns[j]}` }, n)))));
  return el("div", {}, el("h4", {}, title), t);
}

async function renderEval(body, d) {
  const info = await api(`/api/d/${d.id}/info`);
  body.appendChild(el("div", { class: "path" }, info.path, info.data ? " · data " + info.data : "", " · " + info.results_file));
  badData(body, info.problems, 0, "not shown from this directory");
  badData(body, info.bad_rows, info.bad_rows_total, `${info.bad_rows_total} bad rows in ${info.results_file}, left out of the counts and pairs`);
  const judges = Object.keys(info.judges);
  const judge = judges.includes(state.params.judge) ? state.params.judge : judges[0];
  const m = info.metrics || {};
  for (const name of judges) {
    const jm = (m.judges || {})[name] || {};
    const pm = jm.pairs || {};
    body.appendChild(el("h2", {}, name, el("span", { class: "sub" }, `${fmt(jm.items)} items · ${info.judges[name].pairs} pairs`)));
    const cards = el("div", { class: "cards" });
    for (const [k, label, ci] of PAIR_METRICS) {
      if (pm[k] !== undefined) cards.appendChild(stat(label, fmt(pm[k]), ci && pm[ci] ? "95% CI " + fmt(pm[ci]) : null));
    }
    if (pm.length) cards.appendChild(stat("judge picks the longer", fmt(pm.length.judge_longer_preferred), "accuracy when humans preferred the shorter " + fmt(pm.length.accuracy_shorter_preferred)));
    for (const [k, label] of [["masked_rate", "masked"], ["parse_failure_rate", "parse failures"], ["judgments_per_s", "judgments / s"]]) {
      if (jm[k] !== undefined) cards.appendChild(stat(label, fmt(jm[k])));
    }
    if (jm.vs_human) for (const k of ["spearman", "kendall", "pearson"]) cards.appendChild(stat(k, fmt(jm.vs_human[k]), jm.vs_human[k + "_ci95"] ? "95% CI " + fmt(jm.vs_human[k + "_ci95"]) : null));
    body.appendChild(cards);
    const c = info.judges[name].confusion;
    if (c) {
      const conf = el("div", { class: "confusions", style: "margin-top:12px" });
      for (const [key, title] of [["order1", "order 1 (as given)"], ["order2", "order 2 (swapped)"], ["combined", "both orders combined"]]) {
        conf.appendChild(confusionTable(title, { columns: c.columns, rows: c[key] }));
      }
      body.appendChild(conf);
    }
  }
  if (m && Object.keys(m).length) {
    const t = el("table", { class: "grid" });
    for (const [k, v] of flatten(m, "", [])) t.appendChild(el("tr", {}, el("td", { class: "key" }, k), el("td", {}, fmt(v))));
    body.appendChild(el("details", { class: "more" }, el("summary", {}, "all metrics (metrics.json)"), t));
  } else {
    body.appendChild(el("p", { class: "muted" }, "no metrics.json yet (the eval is still running)"));
  }
  if (judge) await renderPairs(body, d, judge, judges, info.judges[judge].counts);
  renderFiles(body, d, info.files);
}

const PAIR_FILTERS = [["all", "all"], ["wrong", "wrong"], ["disagree", "orders disagree"], ["longer_wins", "longer wins"], ["shorter_preferred", "shorter preferred (label)"], ["masked", "masked"]];

async function renderPairs(body, d, judge, judges, counts) {
  const p = state.params, filter = p.filter || "all", page = Number(p.page || 0);
  const data = await api(`/api/d/${d.id}/pairs?judge=${encodeURIComponent(judge)}&filter=${filter}&page=${page}`);
  const pages = Math.max(1, Math.ceil(data.total / data.per_page));
  body.appendChild(el("h2", { id: "pairs" }, "pairs", el("span", { class: "sub" }, "both presentations' critiques and verdicts")));
  body.appendChild(el("div", { class: "toolbar" },
    el("label", {}, "judge "), select(judges, judge, (v) => go({ judge: v, page: 0 })),
    el("label", {}, "show "), select(PAIR_FILTERS.map((f) => f[0]), filter, (v) => go({ filter: v, page: 0 }), PAIR_FILTERS.map((f) => `${f[1]} (${counts[f[0]]})`)),
    el("span", { class: "pager" },
      el("button", { type: "button", disabled: page <= 0, onclick: () => go({ page: page - 1 }) }, "‹ prev"),
      `page ${page + 1} / ${pages}`,
      el("button", { type: "button", disabled: page + 1 >= pages, onclick: () => go({ page: page + 1 }) }, "next ›"))));
  if (data.note) body.appendChild(el("div", { class: "note" }, data.note));
  if (!data.pairs.length) body.appendChild(el("p", { class: "muted" }, "no pair matches"));
  for (const x of data.pairs) body.appendChild(pairCard(x));
}

function verdictPill(v, label) {
  if (v === null || v === undefined) return pill("masked", "bad");
  if (label === null || label === undefined) return pill("verdict " + v, "accent");
  return pill("verdict " + v + (String(label) === v ? " ✓" : " ✗"), String(label) === v ? "good" : "bad");
}

function pairCard(x, heading) {
  if (x.error) return el("div", { class: "group" }, heading ? el("b", {}, heading) : null, el("div", { class: "err" }, "bad row: " + x.error));
  const card = el("div", { class: "group", "data-item": x.item_id });
  card.appendChild(el("div", { class: "pairs-meta" },
    heading ? el("b", {}, heading) : null,
    el("span", { class: "id" }, x.item_id),
    x.label !== null && x.label !== undefined ? pill("label " + x.label) : null,
    x.kind === "pair" ? verdictPill(x.verdict, x.label) : pill("score " + fmt(x.score), "accent"),
    x.order_verdicts ? pill("orders " + x.order_verdicts.map((v) => v || "masked").join(" / "), x.order_verdicts[0] !== x.order_verdicts[1] ? "warn" : null) : null,
    x.margin !== null && x.margin !== undefined ? pill("margin " + fmt(x.margin)) : null,
    x.lengths ? pill("lengths " + x.lengths.join(" / ") + " chars") : null,
    x.parse_failures ? pill(x.parse_failures + " parse failures", "warn") : null));
  if (x.prompt !== null && x.prompt !== undefined) {
    card.appendChild(el("div", {}, el("div", { class: "label" }, "prompt"), el("pre", {}, x.prompt)));
    const resp = el("div", { class: "cols2" });
    (x.responses || []).forEach((r, i) => resp.appendChild(el("div", {},
      el("div", { class: "label" }, `response ${i + 1}` + (String(x.label) === String(i + 1) ? " · preferred by the label" : "") + (x.longer === String(i + 1) ? " · longer" : "")),
      el("pre", {}, r))));
    card.appendChild(resp);
    if (x.reference !== null && x.reference !== undefined) card.appendChild(el("div", {}, el("div", { class: "label" }, "reference"), el("pre", {}, x.reference)));
  }
  const pres = el("div", { class: "cols2" });
  for (const pr of x.presentations) {
    const box = el("div", { class: "pres" }, el("h4", {}, el("span", {}, pr.title), pr.verdict !== null && pr.verdict !== undefined ? verdictPill(pr.verdict, x.label) : pr.score !== null && pr.score !== undefined ? pill("score " + fmt(pr.score), "accent") : null));
    pr.critiques.forEach((c, i) => box.appendChild(el("div", { class: "crit" },
      el("div", { class: "meta" }, `critique ${i + 1} · parsed ${fmt(c.parsed)}` + (c.error ? " · " + c.error : "")),
      el("pre", { class: "critique" }, c.text || ""))));
    pres.appendChild(box);
  }
  card.appendChild(pres);
  return card;
}

async function renderEvalCompare(body) {
  const evals = state.dirs.filter((d) => d.kind === "eval");
  const p = state.params;
  const a = p.a || String(evals[0].id), b = p.b || String(evals[1].id), page = Number(p.page || 0);
  const q = new URLSearchParams({ a, b, page });
  if (p.ja) q.set("ja", p.ja);
  if (p.jb) q.set("jb", p.jb);
  const data = await api("/api/compare?" + q.toString());
  const ids = evals.map((e) => String(e.id)), names = evals.map((e) => e.name);
  const pages = Math.max(1, Math.ceil(data.total / data.per_page));
  body.appendChild(el("h2", {}, "where two judges disagree", el("span", { class: "sub" }, `${data.total} of ${data.common} common items`)));
  body.appendChild(el("div", { class: "toolbar" },
    el("label", {}, "A "), select(ids, a, (v) => go({ a: v, ja: "", page: 0 }), names), el("span", { class: "muted" }, data.judge_a),
    el("label", {}, "B "), select(ids, b, (v) => go({ b: v, jb: "", page: 0 }), names), el("span", { class: "muted" }, data.judge_b),
    el("span", { class: "pager" },
      el("button", { type: "button", disabled: page <= 0, onclick: () => go({ page: page - 1 }) }, "‹ prev"),
      `page ${page + 1} / ${pages}`,
      el("button", { type: "button", disabled: page + 1 >= pages, onclick: () => go({ page: page + 1 }) }, "next ›"))));
  for (const x of data.pairs) {
    body.appendChild(el("div", { class: "cols2" }, pairCard(x.a, "A: " + data.judge_a), pairCard(x.b, "B: " + data.judge_b)));
  }
}

// ------------------------------------------------------------------ start

async function start() {
  try {
    state.dirs = await api("/api/dirs");
  } catch (e) {
    document.getElementById("main").replaceChildren(el("p", { class: "err" }, "cannot reach the grm view server: " + e.message));
    return;
  }
  document.getElementById("refresh").addEventListener("click", render);
  document.getElementById("live").addEventListener("change", (e) => {
    clearInterval(state.timer);
    if (e.target.checked) state.timer = setInterval(render, 5000);
  });
  window.addEventListener("hashchange", render);
  await render();
}

start();
