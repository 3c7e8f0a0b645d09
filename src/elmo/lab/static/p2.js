// Panel 2: one token through characters, char-CNN filters, highway, projection and the LSTM layers.
import {api, h, fmt, run, strip, table, neighbourList} from "./common.js";

const $ = id => document.getElementById(id);
let tokens = [];

export function init(info) {
  const section = $("p2"), out = $("p2-out");
  $("p2-sentence").value = info.examples.bank[2][1];
  const pick = i => run(section, out, async () => {
    for (const [k, b] of [...$("p2-tokens").children].entries()) b.classList.toggle("on", k === i);
    return render(await api("/api/build", {sentence: tokens, index: i}));
  });
  const show = async (index) => {
    // The server tokenizes; a cheap first call gets the tokens, then the clicked one is built.
    const r = await api("/api/build", {sentence: $("p2-sentence").value, index: 0});
    tokens = r.tokens;
    $("p2-tokens").replaceChildren(...tokens.map((t, i) => h("button", {class: "tok", onclick: () => pick(i)}, t)));
    return pick(Math.min(index, tokens.length - 1));
  };
  $("p2-go").addEventListener("click", () => show(0).catch(e => out.replaceChildren(h("p", {class: "error"}, e.message))));
  show(Math.max(0, info.examples.bank[2][1].split(" ").indexOf("bank")))
    .catch(e => { out.replaceChildren(h("p", {class: "error"}, e.message)); section.dataset.state = "error"; });
}

function render(r) {
  const chars = h("div", {class: "chars", id: "p2-chars"}, r.chars.map(c =>
    h("span", {class: "char"}, h("b", {}, c.label), h("small", {}, String(c.id)))),
    r.padding ? h("span", {class: "small"}, ` + ${r.padding} padding ids (261)`) : null);
  const filters = table(["filter", "width", "best match", "strength"],
    r.filters.map(f => [String(f.filter), String(f.width), h("code", {}, f.ngram), fmt(f.value)]), {id: "p2-filters"});
  const stages = h("div", {class: "stages"}, r.stages.map((st, k) => h("div", {class: "card stage"},
    h("p", {}, h("b", {}, `${k + 1}. ${st.stage}`), ` · ${st.dim} numbers · length `, h("span", {class: "norm"}, fmt(st.norm))),
    st.note ? h("p", {class: "small"}, st.note) : null,
    strip(st.preview), h("span", {class: "small"}, " first values"),
    st.neighbours.length ? neighbourList(st.neighbours) : h("p", {class: "small"}, "(no reference table at this stage)"))));
  return [h("p", {class: "headline"}, "“", h("strong", {}, r.token), `” is word ${r.index + 1} of the sentence. Its ${r.chars.length} character ids (begin-of-word, UTF-8 bytes, end-of-word; each +1):`),
    chars, h("p", {}, "The char-CNN filters that fire most for it, and the characters they matched:"), filters,
    h("p", {class: "small"}, r.layer0_matches ? "Check: the projection equals the model's layer 0 for this token." :
      "Warning: the projection differs from the model's layer 0."), stages];
}
