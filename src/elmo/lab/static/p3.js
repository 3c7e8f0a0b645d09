// Panel 3: sliders for the mix weights and gamma; similarities and neighbours of the mixed vectors.
import {api, h, s, fmt, run, table, parseLines, exampleLines, neighbourList} from "./common.js";

const $ = id => document.getElementById(id);
let timer = null;

export function init(info) {
  const section = $("p3"), out = $("p3-out"), L = info.layers;
  const shapes = [["equal weights (a shape, not learned)", Array(L).fill(0), 1],
    ["layer 0 only (a shape)", [6, ...Array(L - 1).fill(0)], 1],
    [`top layer only (a shape)`, [...Array(L - 1).fill(0), 6], 1]];
  const learned = info.presets.map(p => [`${p.name} (learned)`, p.scalar_parameters, p.gamma]);
  const all = [...learned, ...shapes];
  $("p3-preset").replaceChildren(...all.map(([name], i) => h("option", {value: i}, name)));
  $("p3-preset-note").textContent = learned.length ? `learned mixes from: ${info.presets.map(p => p.source).join(", ")}` :
    "Learned mixes (NER, POS, SST-5): not available yet: no task models were given (start the lab with --ner PATH or --preset NAME=PATH).";
  const sliders = [];
  // step "any": a learned preset must load exactly, not snapped to the slider's grid
  for (let j = 0; j < L; j++) sliders.push(slider(`w${j} (layer ${j})`, -6, 6, "any", 0));
  sliders.push(slider("γ (scale)", 0, 3, "any", 1));
  $("p3-sliders").replaceChildren(...sliders.map(x => x.el));
  const apply = i => { const [, w, g] = all[i]; w.forEach((v, j) => sliders[j].set(v)); sliders[L].set(g); };
  $("p3-preset").addEventListener("change", e => { apply(Number(e.target.value)); go(); });
  $("p3-word").value = "bank";
  $("p3-sentences").value = exampleLines(info.examples.bank);
  const go = () => run(section, out, async () => render(await api("/api/mix", {
    word: $("p3-word").value, sentences: parseLines($("p3-sentences").value),
    scalar_parameters: sliders.slice(0, L).map(x => x.value()), gamma: sliders[L].value()})));
  const later = () => { clearTimeout(timer); timer = setTimeout(go, 150); };
  for (const x of sliders) x.input.addEventListener("input", later);
  apply(0);
  go();
}

function slider(name, min, max, step, value) {
  const input = h("input", {type: "range", min, max, step, value});
  const shown = h("span", {class: "val"}, fmt(value, 2));
  input.addEventListener("input", () => { shown.textContent = fmt(input.value, 2); });
  return {el: h("label", {class: "slider"}, name, input, shown), input, value: () => Number(input.value),
    set: v => { input.value = v; shown.textContent = fmt(v, 2); }};
}

function heat(m, labels) {
  const c = 46, pad = 130, top = 20, n = m.length;
  const svg = s("svg", {width: pad + n * c, height: top + n * c, class: "chart", id: "p3-heat"});
  labels.forEach((t, i) => {
    svg.append(s("text", {x: 2, y: top + i * c + c / 2 + 4, class: "legend"}, t));
    svg.append(s("text", {x: pad + i * c + 12, y: top - 6, class: "legend"}, `#${i + 1}`));
  });
  m.forEach((row, i) => row.forEach((v, j) => {
    svg.append(s("rect", {x: pad + j * c, y: top + i * c, width: c - 2, height: c - 2, fill: "#2166ac",
      "fill-opacity": Math.max(0.05, Math.min(1, (v + 1) / 2)).toFixed(2)}));
    svg.append(s("text", {x: pad + j * c + 6, y: top + i * c + c / 2 + 4, class: v > 0.5 ? "cell light" : "cell"}, fmt(v, 2)));
  }));
  return svg;
}

function render(r) {
  const labels = r.occurrences.map((o, i) => `#${i + 1} ${o.token}${o.sense ? " (" + o.sense + ")" : ""}`);
  const d = r.distance;
  const head = h("p", {class: "headline"}, "Layer weights s = ", h("strong", {id: "p3-weights"}, r.weights.map(x => fmt(x)).join(" · ")),
    `, γ = ${fmt(r.gamma, 2)}. `, d.between !== undefined ? ["Similarity across senses ",
      h("strong", {id: "p3-across"}, fmt(1 - d.between)), ", within a sense ", h("strong", {}, fmt(1 - d.within)), "."] : "");
  const rows = r.occurrences.map((o, i) => [labels[i], h("span", {class: "norm"}, fmt(o.norm)), neighbourList(o.neighbours)]);
  return [head, h("p", {class: "small"}, "Cosine similarity of the mixed vectors (1 = same direction):"),
    heat(r.similarity, labels), table(["occurrence", "length of the mixed vector", "nearest (same mix)"], rows, {id: "p3-rows"})];
}
