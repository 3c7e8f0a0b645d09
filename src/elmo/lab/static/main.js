// Loads the model description, then starts every panel with its example so the page shows results at once.
import {api, fmt} from "./common.js";
import * as p1 from "./p1.js";
import * as p2 from "./p2.js";
import * as p3 from "./p3.js";
import * as p4 from "./p4.js";
import * as p5 from "./p5.js";
import * as p6 from "./p6.js";
import * as p7 from "./p7.js";

async function start() {
  const info = await api("/api/info");
  const ref = info.reference;
  document.getElementById("model-info").textContent =
    `Model: ${info.model} · ${info.layers} layers of ${info.dim} numbers per token · ` +
    `reference text for neighbours: ${ref.tokens.toLocaleString()} tokens from ${ref.sentences} sentences ` +
    `(${ref.sources.join(", ")})` + (info.lm.available ? ` · LM vocabulary: ${info.lm.vocab_size.toLocaleString()} words` : "");
  for (const panel of [p1, p2, p3, p4, p5, p6, p7]) panel.init(info);
}

start().catch(e => { document.getElementById("model-info").textContent = `The lab could not start: ${e.message}`; });
export {fmt};
