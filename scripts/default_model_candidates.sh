#!/usr/bin/env bash
# Compare candidate sizes for the bundled default model: each trains for the same wall time on
# wiki_corpus (2 processes x 1 thread, torchrun), then its full-softmax perplexity on the first
# 1,000 lines of valid.txt is measured. Results: RUNS/candidates.jsonl. Usage:
#   scripts/default_model_candidates.sh RUNS_DIR [MINUTES]
set -euo pipefail
runs=${1:?usage: $0 RUNS_DIR [MINUTES]}
minutes=${2:-15}
here=$(cd "$(dirname "$0")/.." && pwd)
data=$here/../shared/data/wiki_corpus
elmo=$(command -v elmo)
mkdir -p "$runs"
[ -f "$runs/vocab-50k.txt" ] || elmo vocab "$data/train.txt.gz" -o "$runs/vocab-50k.txt" --max-size 50000
head -n 1000 "$data/valid.txt" > "$runs/valid-1k.txt"
for dim in 256 512 1024; do
  python - "$runs/cand-$dim.json" "$dim" <<'PY'
import json, sys
json.dump({"lstm": {"dim": int(sys.argv[2]), "projection_dim": 128, "n_layers": 2, "cell_clip": 3, "proj_clip": 3,
                    "use_skip_connections": True},
           "char_cnn": {"activation": "relu", "embedding": {"dim": 16}, "n_highway": 1, "max_characters_per_token": 50,
                        "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 128], [6, 128]], "n_characters": 261}},
          open(sys.argv[1], "w"), indent=1)
PY
  OMP_NUM_THREADS=1 torchrun --standalone --nproc_per_node=2 "$elmo" train --train "$data/train.txt.gz" \
    --vocab "$runs/vocab-50k.txt" --options "$runs/cand-$dim.json" --out "$runs/cand-$dim" --negatives 2048 \
    --threads 1 --seed 1 --max-steps 1000000 --max-minutes "$minutes" --log-every 20 --no-progress
  elmo export "$runs/cand-$dim" -o "$runs/cand-$dim-model" --overwrite
  ppl=$(elmo perplexity "$runs/cand-$dim-model" --test "$runs/valid-1k.txt" --threads 2 --json)
  last=$(tail -n 1 "$runs/cand-$dim/metrics.jsonl")
  echo "{\"dim\": $dim, \"minutes\": $minutes, \"valid_1k\": $ppl, \"last_train_record\": $last}" | tee -a "$runs/candidates.jsonl"
done
