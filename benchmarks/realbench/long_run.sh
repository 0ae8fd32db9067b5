#!/bin/sh
# Issue 27's measurement on the real engine, resumable: the gate section per configuration
# (draft_model self, EAGLE-3 random head, n-gram: the quick disables first), then the tuner and
# the sweep, each step under its own hold of the shared heavy lock (others may run between
# steps; a rerun continues from the results file), then the tables from the file.
#   RESULTS=... SEED=... nohup sh benchmarks/realbench/long_run.sh > LOG 2>&1 &
set -u
R=${RESULTS:-/var/cache/specdec-lab/realbench/results.jsonl}
SEED=${SEED:-4243}
cd "$(dirname "$0")/../.." || exit 1
for c in draft_model eagle3 ngram; do
  echo "== $(date -u +%FT%TZ) gate $c"
  flock /run/specdec-heavy.lock nice -n 10 python3 -u benchmarks/real_engine.py \
    --sections gate --gate-configs "$c" --results "$R" --seed "$SEED" || exit $?
done
echo "== $(date -u +%FT%TZ) tune"
flock /run/specdec-heavy.lock nice -n 10 python3 -u benchmarks/real_engine.py \
  --sections tune --results "$R" --seed "$SEED" || exit $?
echo "== $(date -u +%FT%TZ) report"
python3 benchmarks/real_engine.py --report-only --results "$R"
