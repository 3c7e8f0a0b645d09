// Shared helpers: JSON calls, DOM and SVG building (text only, never HTML strings), small charts.

export async function api(path, body) {
  const init = body === undefined ? {} : {
    method: "POST", headers: {"content-type": "application/json"}, body: JSON.stringify(body)};
  const response = await fetch(path, init);
  let data;
  try { data = await response.json(); } catch { data = {error: `the server answered ${response.status}`}; }
  if (!response.ok) throw new Error(data.error || `the server answered ${response.status}`);
  return data;
}

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) el.append(c instanceof Node ? c : String(c));
  return el;
}

const SVGNS = "http://www.w3.org/2000/svg";
export function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  for (const c of children.flat()) if (c !== null && c !== undefined) el.append(c instanceof Node ? c : String(c));
  return el;
}

export const fmt = (x, d = 3) => (x === null || x === undefined) ? "–" : Number(x).toFixed(d);

// Colours that stay apart for up to 20 labels.
export const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
  "#bcbd22", "#17becf", "#393b79", "#ad494a", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d",
  "#31a354", "#756bb1"];

// Run a panel's job: mark the section busy, show the result or the error, mark it ready.
export async function run(section, out, job) {
  section.dataset.state = "busy";
  out.replaceChildren(h("p", {class: "busy"}, "Computing…"));
  try {
    const nodes = await job();
    out.replaceChildren(...[nodes].flat().filter(n => n !== null && n !== undefined));  // panels leave out what is absent
    section.dataset.state = "ready";
  } catch (e) {
    out.replaceChildren(h("p", {class: "error"}, e.message));
    section.dataset.state = "error";
  }
}

export const missing = (why) => h("p", {class: "missing"}, why);

// A scatter plot: points [{x, y, color, r, label, title}]; the legend sits to the right of the plot.
export function scatter(points, {width = 560, height = 380, legend = []} = {}) {
  const pad = 24, side = legend.length ? 260 : 0;
  const xs = points.map(p => p.x), ys = points.map(p => p.y);
  const [x0, x1] = [Math.min(...xs), Math.max(...xs)], [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  const sx = v => pad + (x1 > x0 ? (v - x0) / (x1 - x0) : 0.5) * (width - 2 * pad);
  const sy = v => height - pad - (y1 > y0 ? (v - y0) / (y1 - y0) : 0.5) * (height - 2 * pad);
  const svg = s("svg", {viewBox: `0 0 ${width + side} ${height}`, width: width + side, height, class: "chart", role: "img"});
  svg.append(s("rect", {x: 0.5, y: 0.5, width: width - 1, height: height - 1, fill: "#fff", stroke: "#ccc"}));
  for (const p of points) {
    const c = s("circle", {class: "pt", cx: sx(p.x).toFixed(1), cy: sy(p.y).toFixed(1), r: p.r || 4, fill: p.color || "#888",
      stroke: p.stroke || "none", "stroke-width": 2, "fill-opacity": p.opacity ?? 0.85});
    if (p.title) c.append(s("title", {}, p.title));
    svg.append(c);
    if (p.label) svg.append(s("text", {x: (sx(p.x) + 7).toFixed(1), y: (sy(p.y) + 4).toFixed(1), class: "pt-label"}, p.label));
  }
  legend.forEach(([name, color], i) => {
    const y = 16 + 16 * i;
    svg.append(s("circle", {cx: width + 14, cy: y - 4, r: 5, fill: color}));
    svg.append(s("text", {x: width + 24, y, class: "legend"}, name));
  });
  return svg;
}

// A row of small bars for a few vector components (blue positive, red negative).
export function strip(values, {cell = 9, height = 22, max = null} = {}) {
  const m = max ?? Math.max(1e-9, ...values.map(Math.abs));
  const svg = s("svg", {width: values.length * cell, height, class: "strip"});
  values.forEach((v, i) => {
    const a = Math.min(1, Math.abs(v) / m);
    svg.append(s("rect", {x: i * cell, y: 0, width: cell - 1, height, fill: v >= 0 ? "#2166ac" : "#b2182b",
      "fill-opacity": (0.15 + 0.85 * a).toFixed(2)}, s("title", {}, fmt(v, 4))));
  });
  return svg;
}

export function table(head, rows, attrs = {}) {
  return h("table", attrs, h("thead", {}, h("tr", {}, head.map(c => h("th", {}, c)))),
    h("tbody", {}, rows.map(r => h("tr", {}, r.map(c => h("td", {}, c))))));
}

// "sense | sentence" lines -> [{text, sense}]
export function parseLines(text) {
  return text.split("\n").map(l => l.trim()).filter(Boolean).map(l => {
    const bar = l.indexOf("|");
    return bar < 0 ? {text: l} : {sense: l.slice(0, bar).trim(), text: l.slice(bar + 1).trim()};
  });
}

export const exampleLines = pairs => pairs.map(([sense, text]) => `${sense} | ${text}`).join("\n");

export function neighbourList(items) {
  return h("ol", {class: "neighbours"}, items.map(n => h("li", {},
    n.left !== undefined ? [h("span", {class: "ctx"}, n.left, " "), h("b", {}, n.token), h("span", {class: "ctx"}, " ", n.right)]
      : h("b", {}, n.token),
    " ", h("span", {class: "sim"}, fmt(n.similarity)),
    n.sense ? h("span", {class: "sense"}, " ", n.sense) : null)));
}
