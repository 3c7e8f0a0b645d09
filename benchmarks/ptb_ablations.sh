#!/usr/bin/env bash
# Issue #26's PTB comparisons at matched epochs (4 each): our biLM of LSTM-Char-Small's size with
# the corpus in order vs shuffled sentences, and with the mean or the sum of the direction losses or
# the forward LM alone; beside Kim et al.'s recipe on a plain word LSTM, in order and shuffled.
# Each run is resumable (rerun the script: finished runs are skipped, the others continue from
# their last checkpoint; a word run restarts, it takes minutes). Logs: RUNS/<name>/benchmark.jsonl
# (biLM), RUNS/<name>.log (all). `python benchmarks/ptb_ablations_table.py RUNS` renders the table.
# LANES=N runs the list as N sequential lanes side by side, THREADS each (default: one lane of 2
# threads; on the 2-core CPU two lanes of 1 thread finish sooner: 1.07 steps/s each against 1.9
# for one lane). DEVICE=cuda for a GPU (word runs stay on the CPU).
# SKIP lists runs to leave out, e.g. SKIP="word" when docs/training.md's table already has them.
#   bash benchmarks/ptb_ablations.sh RUNS [EPOCHS]
#   LANES=2 THREADS=1 bash benchmarks/ptb_ablations.sh RUNS 4
#   DEVICE=cuda LANES=6 THREADS=2 bash benchmarks/ptb_ablations.sh RUNS 4
set -euo pipefail
runs=${1:?usage: $0 RUNS_DIR [EPOCHS]}
epochs=${2:-4}
here=$(cd "$(dirname "$0")" && pwd)
device=${DEVICE:-cpu}
threads=${THREADS:-2}
lanes=${LANES:-1}
skip=" ${SKIP:-} "
mkdir -p "$runs"

names=(bilm-ordered-mean bilm-ordered-sum bilm-ordered-forward word-shuffled bilm-stream-mean word)

finished() {  # a run is done when its log shows the last epoch's validation
  case $1 in
    bilm-*) [ -f "$runs/$1/benchmark.jsonl" ] && grep -q "\"epoch\": $epochs," "$runs/$1/benchmark.jsonl" ;;
    word*) [ -f "$runs/$1.log" ] && grep -q "^epoch $epochs: valid" "$runs/$1.log" ;;
  esac
}

run_one() {
  local name=$1
  [[ "$skip" == *" $name "* ]] && return 0
  finished "$name" && return 0
  case $name in
    bilm-*)
      IFS=- read -r _ batching objective <<< "$name"
      python "$here/ptb_char_small.py" --out "$runs/$name" --batching "$batching" --objective "$objective" \
        --epochs "$epochs" --threads "$threads" --device "$device" > "$runs/$name.log" 2>&1 ;;
    word*)
      local order=""
      [ "$name" = word-shuffled ] && order=--shuffle-sentences
      python "$here/ptb_word_reference.py" --epochs "$epochs" --threads "$threads" $order > "$runs/$name.log" 2>&1 ;;
  esac
}

for ((lane = 0; lane < lanes; lane++)); do
  (
    for ((i = lane; i < ${#names[@]}; i += lanes)); do run_one "${names[i]}"; done
  ) &
done
wait
