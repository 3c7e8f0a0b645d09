// Panel 7: the paper's Table 1 beside our measured numbers, or why we have none.
import {api, h, fmt, run, table} from "./common.js";

const $ = id => document.getElementById(id);

export function init(info) {
  run($("p7"), $("p7-out"), async () => render(await api("/api/results")));
}

const pm = (v, sd) => v === undefined ? "–" : `${fmt(v, 2)}${sd !== undefined ? " ± " + fmt(sd, 2) : ""}`;

function render(r) {
  const rows = r.rows.map(row => [h("b", {}, row.name), `${row.task} (${row.metric})`,
    row.paper ? `${fmt(row.paper.baseline, 2)} → ${fmt(row.paper.elmo, 2)}` : "–",
    row.paper ? h("span", {class: "rer"}, `+${fmt(row.paper.increase, 2)} (${fmt(row.paper.error_reduction, 1)}%)`) : "–",
    row.ours ? `${pm(row.ours.baseline, row.ours.baseline_std)} → ${pm(row.ours.elmo, row.ours.elmo_std)}` : h("span", {class: "missing"}, row.why),
    row.ours && row.ours.increase !== undefined ? `${row.ours.increase >= 0 ? "+" : ""}${fmt(row.ours.increase, 2)} (${fmt(row.ours.error_reduction, 1)}%)` : "–"]);
  return [table(["benchmark", "task", "paper: baseline → +ELMo", "paper: gain (error reduction)", "ours: baseline → +ELMo", "ours: gain (error reduction)"],
    rows, {id: "p7-table"}), h("p", {class: "small"}, r.source ? `Our numbers: ${r.source}.` :
    "No measured numbers of ours yet."), h("p", {class: "small"},
    "Paper: Peters et al. (2018), Table 1. Gains and error reductions are computed here from the two rounded " +
    "figures, so one can differ from the paper's own by 0.01.")];
}
