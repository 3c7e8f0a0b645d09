// Panel 4: [x; ELMo] per token and the NER tagger's predictions without and with ELMo.
import {api, h, fmt, run, strip, table, missing} from "./common.js";

const $ = id => document.getElementById(id);

export function init(info) {
  const section = $("p4"), out = $("p4-out");
  $("p4-sentence").value = "Ekeus met officials of the United Nations in Baghdad on Monday .";
  const go = () => run(section, out, async () => render(await api("/api/tag", {sentence: $("p4-sentence").value})));
  $("p4-go").addEventListener("click", go);
  go();
}

function render(r) {
  const have = name => r.taggers.includes(name);
  const rows = r.rows.map(row => [row.token,
    h("span", {}, row.word ? strip(row.word.preview, {cell: 5}) : h("span", {class: "small"}, "x: –"), " ; ",
      strip(row.elmo.preview, {cell: 5})),
    row.word ? `${row.word.dim}` : "–",
    h("span", {class: "elmo-dim"}, `${row.elmo.dim} (length ${fmt(row.elmo.norm)})`),
    have("baseline") ? h("b", {}, row.tags.baseline) : "–", have("elmo") ? h("b", {}, row.tags.elmo) : "–"]);
  return [
    h("p", {class: "headline"}, `ELMo part: ${r.rows[0].elmo.dim} numbers per token, mixed with weights `,
      h("strong", {id: "p4-mix"}, r.mix.weights.map(x => fmt(x)).join(" · ")), ` and γ = ${fmt(r.mix.gamma, 2)} (${r.mix.source}).`),
    r.why ? missing(`Tagger predictions: ${r.why}`) : null,
    r.word_why ? missing(`Word part x: not available yet: ${r.word_why}.`) : null,
    table(["token", "[x ; ELMo] (first values)", "x dims", "ELMo dims", "tag without ELMo", "tag with ELMo"], rows, {id: "p4-rows"})];
}
