// Panel 6: the forward LM's guess from the left and the backward LM's guess from the right, per token.
import {api, h, fmt, run, table, missing} from "./common.js";

const $ = id => document.getElementById(id);

export function init(info) {
  const section = $("p6"), out = $("p6-out");
  $("p6-sentence").value = "The cat sat on the mat .";
  const go = () => run(section, out, async () => render(await api("/api/directions", {sentence: $("p6-sentence").value})));
  $("p6-go").addEventListener("click", go);
  go();
}

const guesses = g => h("span", {class: "guesses"}, g.top.map((t, i) => h("span", {class: i ? "" : "best"},
  `${t.word} ${fmt(t.p)}`, i < g.top.length - 1 ? " · " : "")));
const own = g => g.target_p === undefined ? "–" :
  h("span", {}, h("b", {class: "target-p"}, fmt(g.target_p, 4)), ` (rank ${g.target_rank}${g.in_vocab ? "" : ", as <UNK>"})`);

function render(r) {
  if (!r.available) return missing(r.why);
  return [h("p", {class: "headline"}, `Vocabulary: ${r.vocab_size.toLocaleString()} words. Forward LM's first guess for word 1: `,
      h("strong", {id: "p6-first"}, `${r.rows[0].forward.top[0].word} ${fmt(r.rows[0].forward.top[0].p)}`), "."),
    table(["word", "forward LM (from the left): top 5", "p(word)", "backward LM (from the right): top 5", "p(word)"],
      r.rows.map(x => [h("b", {}, x.token), guesses(x.forward), own(x.forward), guesses(x.backward), own(x.backward)]), {id: "p6-rows"})];
}
