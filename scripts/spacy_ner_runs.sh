#!/usr/bin/env bash
# Issue #64's measured runs: spaCy NER on CoNLL-2003, ELMo and static arms, seeds 1-3, one after another on one
# core (docs/integrations.md). Usage: scripts/spacy_ner_runs.sh RUNS_DIR (holding data/ from `spacy convert`).
# The code runs from RUNS_DIR/code, this checkout's HEAD as committed (git archive), so edits made while the runs
# go on change none of them. Each run writes benchmarks/results/spacy-ner/ARM-sSEED.json here and logs to
# RUNS_DIR/ARM-sSEED.log; a run that fails is reported and the next one starts.
set -u
runs=${1:?usage: scripts/spacy_ner_runs.sh RUNS_DIR}
repo=$(cd "$(dirname "$0")/.." && pwd)
code=$runs/code
rm -rf "$code" && mkdir -p "$code" && git -C "$repo" archive HEAD | tar -x -C "$code"
echo "code: $(git -C "$repo" rev-parse HEAD)"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$code/src
for seed in 1 2 3; do
  for arm in elmo static; do
    name=$arm-s$seed
    echo "$(date -u +%FT%TZ) start $name"
    (cd "$code" && taskset -c 0 nice -n 0 "$repo/.venv/bin/python" scripts/spacy_ner.py train \
      --config examples/spacy/ner-$arm.cfg --seed $seed --data "$runs/data" --work "$runs/$name" \
      --out "$repo/benchmarks/results/spacy-ner/$name.json") > "$runs/$name.log" 2>&1 \
      || echo "$(date -u +%FT%TZ) FAILED $name (see $runs/$name.log)"
    echo "$(date -u +%FT%TZ) end $name"
  done
done
