// Panel 5: reference tokens per layer coloured by POS or sense, with the cluster purity of each layer.
import {api, h, fmt, run, scatter, table, missing, PALETTE} from "./common.js";

const $ = id => document.getElementById(id);
let data = null, layer = 1;

export function init(info) {
  const section = $("p5"), out = $("p5-out");
  layer = Math.min(1, info.layers - 1);
  $("p5-layers").replaceChildren(...Array.from({length: info.layers}, (_, j) =>
    h("button", {class: "layer-btn", "data-layer": j, onclick: () => { layer = j; draw(); }}, `layer ${j}`)));
  const draw = () => run(section, out, async () => {
    data = data || await api("/api/layers");
    return render();
  });
  $("p5-labels").addEventListener("change", draw);
  $("p5-word").addEventListener("change", draw);
  draw();
}

function render() {
  const mode = $("p5-labels").value;
  for (const b of $("p5-layers").children) b.classList.toggle("on", Number(b.dataset.layer) === layer);
  const words = Object.keys(data.senses);
  if ($("p5-word").options.length !== words.length) $("p5-word").replaceChildren(...words.map(w => h("option", {value: w}, w)));
  $("p5-word-label").hidden = mode !== "senses";
  const view = mode === "pos" ? data.pos : data.senses[$("p5-word").value];
  if (!view) return missing(data.why[mode] || "not available");
  const names = [...new Set(view.labels)].sort();
  const colour = l => PALETTE[names.indexOf(l) % PALETTE.length];
  const pts = view.layers[layer];
  const points = view.tokens.map((t, i) => ({x: pts.x[i], y: pts.y[i], color: colour(view.labels[i]), r: 4,
    title: `${view.contexts[i]} — ${view.labels[i]}`}));
  const purity = mode === "pos" ? view.purity : data.sense_purity;
  const what = mode === "pos" ? `${view.tokens.length} tokens, ${names.length} POS tags` :
    `${view.tokens.length} occurrences of “${$("p5-word").value}”, ${names.length} senses`;
  return [
    h("p", {class: "headline"}, `Layer ${layer}: cluster purity `, h("strong", {id: "p5-purity"}, fmt(view.purity[layer])),
      ` for ${what} (a share of 1 = every cluster holds one colour; `, `${fmt(view.majority)} if everything were one cluster).`),
    scatter(points, {legend: names.slice(0, 20).map(n => [n.length > 40 ? n.slice(0, 40) + "…" : n, colour(n)])}),
    table(["layer", mode === "pos" ? "POS purity" : `purity for “${$("p5-word").value}”`, mode === "pos" ? "" : "mean over all words"],
      view.purity.map((p, j) => [String(j) + (j === layer ? " ◀" : ""), fmt(p), mode === "pos" ? "" : fmt(purity[j])]), {id: "p5-table"}),
    h("p", {class: "small"}, `Hover a point for its sentence. 2-D view: principal components of layer ${layer} (${fmt(100 * (pts.variance[0] + pts.variance[1]), 0)}% of the spread); purity uses the full vectors.`)];
}
