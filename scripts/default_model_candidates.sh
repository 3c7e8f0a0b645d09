#!/usr/bin/env bash
# Compare candidate sizes for the bundled default model on wiki_corpus: the three train at the same
# time for the same wall time (one process, one thread each, so they share the machine equally),
# one sentence per row from zero state (the way the stateless embedder uses the model), then each
# one's full-softmax perplexity on the first 1,000 lines of valid.txt is measured in the same mode.
# Results: RUNS/candidates.jsonl. Usage: scripts/default_model_candidates.sh RUNS_DIR [MINUTES]
set -euo pipefail
runs=${1:?usage: $0 RUNS_DIR [MINUTES]}
minutes=${2:-20}
here=$(cd "$(dirname "$0")/.." && pwd)
data=$here/../shared/data/wiki_corpus
mkdir -p "$runs"
[ -f "$runs/vocab-50k.txt" ] || elmo vocab "$data/train.txt.gz" -o "$runs/vocab-50k.txt" --max-size 50000
head -n 1000 "$data/valid.txt" > "$runs/valid-1k.txt"
dims="256 512 1024"
for dim in $dims; do
  python - "$runs/cand-$dim.json" "$dim" <<'PY'
import json, sys
json.dump({"lstm": {"dim": int(sys.argv[2]), "projection_dim": 128, "n_layers": 2, "cell_clip": 3, "proj_clip": 3,
                    "use_skip_connections": True},
           "char_cnn": {"activation": "relu", "embedding": {"dim": 16}, "n_highway": 1, "max_characters_per_token": 50,
                        "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 128], [6, 128]], "n_characters": 261}},
          open(sys.argv[1], "w"), indent=1)
PY
  OMP_NUM_THREADS=1 elmo train --train "$data/train.txt.gz" --vocab "$runs/vocab-50k.txt" --options "$runs/cand-$dim.json" \
    --out "$runs/cand-$dim" --batching sentence --negatives 2048 --threads 1 --seed 1 --max-steps 1000000 \
    --max-minutes "$minutes" --log-every 20 --no-progress &
done
wait
for dim in $dims; do
  elmo export "$runs/cand-$dim" -o "$runs/cand-$dim-model" --overwrite
  ppl=$(elmo perplexity "$runs/cand-$dim-model" --test "$runs/valid-1k.txt" --mode sentence --threads 2 --json)
  last=$(tail -n 1 "$runs/cand-$dim/metrics.jsonl")
  echo "{\"dim\": $dim, \"minutes\": $minutes, \"valid_1k_sentence_mode\": $ppl, \"last_train_record\": $last}" \
    | tee -a "$runs/candidates.jsonl"
done
