#!/usr/bin/env bash
# Same records before and after: runs `pipelines.sample --runner InMemory` with two checkouts
# (BEFORE, default /work/main, read only; AFTER, default this one) on the same graphs and
# compares every output shard with cmp. Graphs: the demo graph and generated MAG-shaped
# graphs (all node sets with features, cites weighted), with edge and node aggregation, a
# weighted spec (RANDOM_WEIGHTED and TOP_K on cites) and a link spec (symmetric_link_seed_op,
# negatives). Exits 1 on the first difference.
#
#   bash scripts/cmp_in_memory.sh [BEFORE] [AFTER] [WORK_DIR]
set -euo pipefail
AFTER_DEFAULT="$(cd "$(dirname "$0")/.." && pwd)"
BEFORE="${1:-/work/main}"
AFTER="${2:-$AFTER_DEFAULT}"
WORK="${3:-/tmp/cmp_in_memory}"
PY="$AFTER/.venv/bin/python"
export TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL=3
mkdir -p "$WORK"

gen() {  # gen NAME FLAGS...: a graph generated with AFTER (the generator is not compared)
  local dir="$WORK/$1"; shift
  if [ ! -f "$dir/sampling_spec.pbtxt" ]; then
    (cd "$AFTER" && PYTHONPATH="$AFTER" "$PY" -m pipelines.generate --output_dir "$dir" \
      --write_spec "$@" >/dev/null)
  fi
  echo "$dir"
}

run() {  # run CHECKOUT OUT SCHEMA SPEC FLAGS...
  local checkout="$1" out="$2" schema="$3" spec="$4"; shift 4
  rm -rf "$out"
  (cd "$checkout" && PYTHONPATH="$checkout" "$PY" -m pipelines.sample --runner InMemory \
    --graph_schema "$schema" --sampling_spec "$spec" --output_samples "$out/samples@3" "$@" \
    >/dev/null)
}

compare() {  # compare NAME SCHEMA SPEC FLAGS...
  local name="$1"; shift
  run "$BEFORE" "$WORK/out/$name/before" "$@"
  run "$AFTER" "$WORK/out/$name/after" "$@"
  local n=0
  for f in "$WORK/out/$name/before"/samples-*; do
    cmp "$f" "$WORK/out/$name/after/$(basename "$f")"
    n=$((n + $(stat -c %s "$f")))
  done
  echo "same bytes: $name ($n bytes)"
}

DEMO="$WORK/demo"
if [ ! -f "$DEMO/graph_schema.pbtxt" ]; then
  (cd "$AFTER" && PYTHONPATH="$AFTER" "$PY" -c "
import sys
from sampler.tools import synthetic
synthetic.write_graph(synthetic.generate_mag(2000, seed=0), sys.argv[1])
synthetic.write_sampling_spec(synthetic.mag_sampling_spec(), sys.argv[1] + '/sampling_spec.pbtxt')
" "$DEMO")
fi
MAG="$(gen mag3000 --num_papers 3000 --all_node_features --edge_weights --feature_dim 8 \
  --format parquet)"
BIG="$(gen mag20000_d128 --num_papers 20000 --feature_dim 128)"

cat > "$WORK/weighted_spec.pbtxt" <<'EOF'
seed_op { op_name: "seed" node_set_name: "paper" }
sampling_ops { op_name: "cited" input_op_names: "seed" edge_set_name: "cites" sample_size: 8
  strategy: RANDOM_WEIGHTED }
sampling_ops { op_name: "authors" input_op_names: "seed" input_op_names: "cited"
  edge_set_name: "written" sample_size: 4 strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "their_papers" input_op_names: "authors" edge_set_name: "writes"
  sample_size: 4 strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "top_cited" input_op_names: "their_papers" edge_set_name: "cites"
  sample_size: 3 strategy: TOP_K }
EOF
cat > "$WORK/link_spec.pbtxt" <<'EOF'
symmetric_link_seed_op { op_name: "seed" }
sampling_ops { op_name: "cited" input_op_names: "seed" edge_set_name: "cites" sample_size: 8
  strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "authors" input_op_names: "seed" edge_set_name: "written"
  sample_size: 4 strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "their_papers" input_op_names: "authors" edge_set_name: "writes"
  sample_size: 4 strategy: RANDOM_UNIFORM }
EOF
mkdir -p "$WORK/inputs"
SEEDS="$WORK/inputs/link_seeds.csv"
printf '#source,#target\n' > "$SEEDS"
for i in $(seq 1 300); do printf 'p%d,p%d\n' "$i" "$(( (i * 7) % 3000 ))" >> "$SEEDS"; done

compare demo_edge "$DEMO/graph_schema.pbtxt" "$DEMO/sampling_spec.pbtxt"
compare demo_node "$DEMO/graph_schema.pbtxt" "$DEMO/sampling_spec.pbtxt" \
  --edge_aggregation_method node --seed 3
compare mag_edge "$MAG/graph_schema.pbtxt" "$MAG/sampling_spec.pbtxt" --seed 1
compare mag_node "$MAG/graph_schema.pbtxt" "$MAG/sampling_spec.pbtxt" \
  --edge_aggregation_method node
compare mag_weighted "$MAG/graph_schema.pbtxt" "$WORK/weighted_spec.pbtxt" --seed 5
compare mag_weighted_node "$MAG/graph_schema.pbtxt" "$WORK/weighted_spec.pbtxt" \
  --edge_aggregation_method node
compare link_edge "$MAG/graph_schema.pbtxt" "$WORK/link_spec.pbtxt" --seed_edge_set cites \
  --input_seeds "$SEEDS" --negatives_per_seed 2
compare link_node "$MAG/graph_schema.pbtxt" "$WORK/link_spec.pbtxt" --seed_edge_set cites \
  --edge_aggregation_method node --negatives_per_seed 1 --keep_seed_edges
compare big_edge "$BIG/graph_schema.pbtxt" "$BIG/sampling_spec.pbtxt"
