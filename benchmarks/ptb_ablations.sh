#!/usr/bin/env bash
# Issue #26's PTB comparisons at matched epochs (4 each): our biLM of LSTM-Char-Small's size with
# the corpus in order vs shuffled sentences, and with the mean or the sum of the direction losses or
# the forward LM alone; beside Kim et al.'s recipe on a plain word LSTM, in order and shuffled.
# Each line is resumable (rerun the script); logs: RUNS/<name>/benchmark.jsonl and RUNS/word-*.log.
# About 25 minutes an epoch on the idle 2-core CPU, a few on one GPU (--device cuda via DEVICE=cuda).
# PARALLEL=1 starts all six at once (a GPU machine with many cores: the small models leave the GPU
# mostly idle one at a time), THREADS each; the logs then share no time budget with anything else.
# SKIP lists runs to leave out whose epochs are already logged with the same recipe, e.g.
# SKIP="bilm-stream-mean word": the 25-epoch run (benchmarks/results/ptb-char-small-cpu.jsonl) is
# stream/mean, and docs/training.md's word reference table has the in-order word LSTM's 4 epochs.
#   bash benchmarks/ptb_ablations.sh RUNS [EPOCHS]
#   DEVICE=cuda THREADS=2 PARALLEL=1 bash benchmarks/ptb_ablations.sh RUNS 4
set -euo pipefail
runs=${1:?usage: $0 RUNS_DIR [EPOCHS]}
epochs=${2:-4}
here=$(cd "$(dirname "$0")" && pwd)
device=${DEVICE:-cpu}
threads=${THREADS:-2}
parallel=${PARALLEL:-}
skip=" ${SKIP:-} "
mkdir -p "$runs"
start() { if [ -n "$parallel" ]; then "$@" & else "$@"; fi; }
for setup in "ordered mean" "stream mean" "ordered sum" "ordered forward"; do
  set -- $setup
  [[ "$skip" == *" bilm-$1-$2 "* ]] && continue
  start python "$here/ptb_char_small.py" --out "$runs/bilm-$1-$2" --batching "$1" --objective "$2" \
    --epochs "$epochs" --threads "$threads" --device "$device" > "$runs/bilm-$1-$2.log" 2>&1
done
for order in "" "--shuffle-sentences"; do
  name=word${order:+-shuffled}
  [[ "$skip" == *" $name "* ]] && continue
  [ -s "$runs/$name.log" ] || start python "$here/ptb_word_reference.py" --epochs "$epochs" --threads "$threads" $order \
    > "$runs/$name.log"  # CPU only
done
wait
