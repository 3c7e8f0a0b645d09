"""Run the paper's downstream grid and write docs/results.md with its tables and PNG figures.

Grid: NER (CoNLL-2003), POS (UD EWT UPOS), SST-5 - static baseline vs +ELMo, 3 seeds; NER at 1%,
10% and 100% of the training data; POS probes (CoNLL-2000 PTB tags, UD EWT UPOS) and WSD probes
per biLM layer. Every run writes its own metrics JSON under --out and is skipped when that file
exists, so the grid can be stopped and resumed. Every number in the report comes from those files,
next to the exact command that produced it.
Several copies of the same command share the grid: each takes the next run no live process holds.

    python scripts/run_results.py --elmo default                      # the full grid (hours on a CPU)
    python scripts/run_results.py --arms static --docs runs/partial   # the half that needs no biLM
    python scripts/run_results.py --render-only                       # rewrite docs from what exists
    python scripts/run_results.py --smoke --out runs/smoke --docs runs/smoke-docs  # tiny slices, fixture biLM
"""

# The parts, each one job (scripts/run_results.py is the command):
#   grid.py        the command line's Grid, the data files and the plan of runs
#   work_queue.py  running the plan: a lock file per run, so several processes share it
#   stats.py       reading the metrics files: scores, means ± std, paired gains
#   report.py      results.md's grid sections (Table 1, low resource, probes, layer weights, commands) and render
#   verdicts.py    the bars the results are held to, computed
#   arms.py        the paired arms and the domain-tuning section
#   notebook.py    the lab notebook (notebook.json): what ran when and beside what, the arms, the PTB runs
#   ptb.py         the PTB language-modelling section; curves.py fits its validation curve
#   plots.py       the PNG figures
#   cli.py         the flags, the recipes and main
