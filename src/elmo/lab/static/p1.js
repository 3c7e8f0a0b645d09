// Panel 1: the word's one static point against its contextual points, with the distance between senses.
import {api, h, fmt, run, scatter, table, parseLines, exampleLines, neighbourList, PALETTE} from "./common.js";

const $ = id => document.getElementById(id);

export function init(info) {
  const section = $("p1"), out = $("p1-out");
  const words = Object.keys(info.examples);
  $("p1-example").replaceChildren(...words.map(w => h("option", {value: w}, w)));
  for (let j = info.layers - 1; j >= 1; j--) $("p1-layer").append(h("option", {value: j}, `layer ${j}`));
  const load = w => { $("p1-word").value = w; $("p1-sentences").value = exampleLines(info.examples[w]); };
  $("p1-example").addEventListener("change", e => { load(e.target.value); go(); });
  const go = () => run(section, out, async () => render(await api("/api/contextual", {
    word: $("p1-word").value, sentences: parseLines($("p1-sentences").value), layer: Number($("p1-layer").value),
    paragraph: $("p1-paragraph").value})));
  $("p1-go").addEventListener("click", go);
  $("p1-layer").addEventListener("change", go);
  load(words[0]);
  go();
}

function render(r) {
  const top = r.distances[r.layer];
  const senses = [...new Set(r.occurrences.map(o => o.sense).filter(Boolean))];
  const colour = sense => PALETTE[Math.max(0, senses.indexOf(sense)) % PALETTE.length];
  const headline = top.between !== undefined
    ? h("p", {class: "headline"}, `In layer ${r.layer}, the ${senses.length} senses of “${r.word}” are `,
        h("strong", {id: "p1-between"}, fmt(top.between)), " apart (mean cosine distance between occurrences of different senses); within a sense: ",
        h("strong", {id: "p1-within"}, fmt(top.within)), ".")
    : h("p", {class: "headline"}, `In layer ${r.layer}, the occurrences are on average `,
        h("strong", {id: "p1-between"}, fmt(top.mean)), " apart (cosine distance).");
  const staticLine = h("p", {class: "headline"}, "The static vector (layer 0) is ",
    h("strong", {id: "p1-static-points"}, String(r.static.points)), r.static.points === 1 ? " point" : " points",
    ` for all ${r.occurrences.length} occurrences (largest distance between them: `,
    h("strong", {id: "p1-static-spread"}, fmt(r.static.spread)), ").");
  const pts = r.plot.points.map(p => ({...p,
    color: p.kind === "static" ? "#000" : p.kind === "context" ? colour(p.sense) : "#bbb",
    r: p.kind === "neighbour" ? 3 : 7, stroke: p.kind === "static" ? "#fc0" : "none",
    label: p.kind === "neighbour" ? null : p.label, title: p.label + (p.sense ? ` (${p.sense})` : "")}));
  const legend = [["static (layer 0)", "#000"], ...senses.map(x => [`${r.word}: ${x}`, colour(x)]), ["reference neighbours", "#bbb"]];
  const dist = table(["layer", "between senses", "within a sense", "all pairs"],
    r.distances.map(d => [d.layer === 0 ? "0 (static)" : String(d.layer), fmt(d.between), fmt(d.within), fmt(d.mean)]),
    {id: "p1-distances"});
  const occ = h("div", {class: "cols"}, r.occurrences.map(o => h("div", {class: "card"},
    h("p", {}, h("b", {}, `#${o.sentence + 1}`), o.sense ? ` (${o.sense}) ` : " ", o.text),
    h("p", {class: "small"}, `nearest in layer ${r.layer}:`), neighbourList(o.neighbours))));
  return [headline, staticLine, scatter(pts, {legend}),
    h("p", {class: "small"}, `2-D view: principal components of these points (they keep ${fmt(100 * (r.plot.variance[0] + r.plot.variance[1]), 0)}% of the spread); the numbers above use the full vectors.`),
    dist, h("p", {class: "small"}, `Static point's nearest words (by characters only): `,
      r.static.neighbours.map(n => `${n.token} ${fmt(n.similarity)}`).join(", ")), occ, ...paragraph(r)];
}

function paragraph(r) {
  if (!r.paragraph) return [];
  const p = r.paragraph;
  const layers = r.distances.map(d => d.layer).filter(j => j > 0);
  return [h("p", {class: "headline"}, `With the paragraph (${p.sentences} sentences, ${p.tokens} tokens) read before each sentence:`),
    table(["occurrence", ...layers.map(j => `cosine layer ${j} (forward half)`), `new neighbours in layer ${r.layer}`, "nearest now"],
      p.occurrences.map(o => [`${o.token} #${o.sentence + 1}`,
        ...layers.map(j => `${fmt(o.cosine[j])} (${fmt(o.forward_cosine[j])})`), String(o.new_neighbours),
        o.neighbours.map(n => n.token).join(", ")]),
      {id: "p1-paragraph-table"}),
    h("p", {class: "small"}, "Cosine of each vector with the paragraph against the same vector without it (1 = unchanged).")];
}
