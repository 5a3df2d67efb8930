"""Train a small TF-GNN link predictor on link-prediction samples (symmetric_link_seed_op).

    python -m pipelines.sample --graph_schema G --sampling_spec link_spec.pbtxt \\
        --seed_edge_set cites --negatives_per_seed 1 --output_samples out/links/samples@4
    python examples/train_link_prediction.py --samples 'out/links/samples-*' --epochs 5

Each example is one candidate edge in TF-GNN's structured readout convention: node set
`_readout` (one node, feature `label`: 1 for a seed edge, 0 for a negative) and edge sets
`_readout/source`, `_readout/target` from the two endpoints. The model:

  * initial states: float features through a Dense layer (string and int features are
    dropped); a latent node set (only `#id`) embeds its hashed `#id`; `_readout` gets none.
  * one round of message passing toward the endpoints (sampled edges point away from the
    seed, so `receiver_tag=tfgnn.SOURCE`); `_readout/*` edge sets carry no messages.
  * `tfgnn.keras.layers.StructuredReadout("source")` and `("target")`, a dot product, binary
    cross-entropy on the `_readout` label.

The seed edge is not in its own subgraph (the sampler's default), so the model predicts it
from the endpoints' features and neighbourhoods, not by finding it. Examples are split by
seed edge (a positive and its negatives on the same side): hash(sample id without `#neg<k>`)
% 5 == 0 is held out. Prints one JSON line (per-epoch loss, held-out AUC) and writes it to --report.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # before TensorFlow is imported
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_gnn as tfgnn  # noqa: E402

READOUT = "_readout"
LABEL = "label"
DENSE_INPUTS = (tf.float32, tf.float64)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", required=True, help="Glob of the sampled TFRecord files.")
    parser.add_argument("--schema", help="Output schema (default: schema.pbtxt beside samples).")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--units", type=int, default=32)
    parser.add_argument("--id_buckets", type=int, default=4096, help="Hash buckets for #id.")
    parser.add_argument("--learning_rate", type=float, default=5e-3)
    parser.add_argument("--seed", type=int, default=0, help="Keras weight initialization.")
    parser.add_argument("--report", help="Also write the JSON report to this path.")
    return parser.parse_args(argv)


def auc(labels, scores) -> float:
    """Area under the ROC curve: P(score of a positive > score of a negative), ties count 1/2
    (the Mann-Whitney U statistic over average ranks)."""
    labels = np.asarray(labels, bool)
    scores = np.asarray(scores, float)
    positives, negatives = int(labels.sum()), int((~labels).sum())
    if not positives or not negatives:
        raise ValueError("AUC needs positives and negatives")
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    i = 0
    while i < len(scores):  # average ranks (1-based) over runs of equal scores
        j = i
        while j + 1 < len(scores) and sorted_scores[j + 1] == sorted_scores[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    u = ranks[labels].sum() - positives * (positives + 1) / 2
    return float(u / (positives * negatives))


def input_features(schema) -> dict[str, list[str]]:
    """Per node set (not `_readout`), the float features a Dense layer can take."""
    return {
        name: [
            f
            for f, spec in sorted(node_set.features.items())
            if tf.dtypes.as_dtype(spec.dtype) in DENSE_INPUTS
        ]
        for name, node_set in schema.node_sets.items()
        if name != READOUT
    }


def make_datasets(files, graph_spec, args, features):
    """{train, validation}: batches of (GraphTensor, label), split by seed edge."""

    def held_out(serialized):
        graph = tfgnn.parse_single_example(graph_spec, serialized)
        # A negative's sample id is its seed edge's plus `#neg<k>`; its seed_id names its own
        # (source, negative target) pair, so the split keys on the sample id.
        seed_edge = tf.strings.regex_replace(graph.context["sample_id"][0], "#neg[0-9]+$", "")
        return tf.equal(tf.strings.to_hash_bucket_fast(seed_edge, 5), 0)

    def parse(serialized):
        graph = tfgnn.parse_example(graph_spec, serialized).merge_batch_to_components()
        labels = tf.cast(tf.reshape(graph.node_sets[READOUT][LABEL], [-1]), tf.float32)
        node_sets = {READOUT: {}}  # the label must not enter the model
        for name, node_set in graph.node_sets.items():
            if name == READOUT:
                continue
            kept = {f: tf.cast(node_set[f], tf.float32) for f in features[name]}
            if not kept:  # latent set: its hashed #id seeds an embedding
                kept = {tfgnn.HIDDEN_STATE: tf.strings.to_hash_bucket_fast(
                    node_set["#id"], args.id_buckets)}  # fmt: skip
            node_sets[name] = kept
        return graph.replace_features(context={}, node_sets=node_sets), labels

    records = tf.data.TFRecordDataset(files)
    split = {
        "train": records.filter(lambda r: tf.logical_not(held_out(r))),
        "validation": records.filter(held_out),
    }
    return {name: ds.batch(args.batch_size).map(parse).cache() for name, ds in split.items()}


def build_model(graph_spec, schema, features, args) -> tf.keras.Model:
    units = args.units

    def dense(width=units, activation="relu"):
        return tf.keras.layers.Dense(width, activation=activation)

    # Messages flow from each edge's target to its source: toward the seed edge's endpoints.
    toward = {name: [] for name in schema.node_sets if name != READOUT}
    for edge_set, spec in sorted(schema.edge_sets.items()):
        if not edge_set.startswith(READOUT):
            toward[spec.source].append(edge_set)
    ends = {schema.edge_sets[f"{READOUT}/{k}"].source for k in ("source", "target")}
    used = ends | {schema.edge_sets[e].target for end in ends for e in toward[end]}

    def init_state(node_set, *, node_set_name):
        if node_set_name not in used:
            return {}  # `_readout`, and sets no message reaches the endpoints from
        if features[node_set_name]:
            parts = [node_set[f] for f in features[node_set_name]]
            parts = [p if p.shape.rank > 1 else p[:, None] for p in parts]
            return dense()(tf.concat(parts, axis=1))
        return tf.keras.layers.Embedding(args.id_buckets, units)(node_set[tfgnn.HIDDEN_STATE])

    inputs = tf.keras.layers.Input(type_spec=graph_spec)
    graph = tfgnn.keras.layers.MapFeatures(node_sets_fn=init_state)(inputs)
    graph = tfgnn.keras.layers.GraphUpdate(
        node_sets={
            name: tfgnn.keras.layers.NodeSetUpdate(
                {
                    edge_set: tfgnn.keras.layers.SimpleConv(
                        dense(), "mean", receiver_tag=tfgnn.SOURCE
                    )
                    for edge_set in edge_sets
                },
                tfgnn.keras.layers.NextStateFromConcat(dense(activation=None)),
            )
            for name, edge_sets in toward.items()
            if edge_sets and name in ends  # only the endpoints' states are read out
        }
    )(graph)
    source = tfgnn.keras.layers.StructuredReadout("source")(graph)
    target = tfgnn.keras.layers.StructuredReadout("target")(graph)
    score = tf.keras.layers.Dot(axes=1)([source, target])
    return tf.keras.Model(inputs, tf.reshape(score, [-1]))


def main(argv=None) -> dict:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    tf.keras.utils.set_random_seed(args.seed)
    files = sorted(f for f in glob.glob(args.samples) if not f.endswith((".json", ".pbtxt")))
    if not files:
        raise SystemExit(f"error: no files match --samples {args.samples}")
    schema_path = args.schema or os.path.join(os.path.dirname(files[0]), "schema.pbtxt")
    schema = tfgnn.read_schema(schema_path)
    if READOUT not in schema.node_sets or LABEL not in schema.node_sets[READOUT].features:
        raise SystemExit(f"error: {schema_path}: no {READOUT} node set with '{LABEL}'")
    features = input_features(schema)
    data = make_datasets(files, tfgnn.create_graph_spec_from_schema_pb(schema), args, features)
    model = build_model(data["train"].element_spec[0], schema, features, args)
    model.compile(
        tf.keras.optimizers.Adam(args.learning_rate),
        loss=tf.keras.losses.BinaryCrossentropy(from_logits=True),
    )
    losses, aucs = [], []
    val_labels = np.concatenate([y.numpy() for _, y in data["validation"]])
    for _ in range(args.epochs):
        history = model.fit(data["train"], epochs=1, verbose=0)
        losses.append(round(float(history.history["loss"][0]), 4))
        scores = np.concatenate([model(g, training=False).numpy() for g, _ in data["validation"]])
        aucs.append(round(auc(val_labels, scores), 4))
    train_labels = np.concatenate([y.numpy() for _, y in data["train"]])
    report = {
        "train_records": len(train_labels),
        "validation_records": len(val_labels),
        "validation_positives": int(val_labels.sum()),
        "loss": losses,
        "val_auc": aucs,
    }
    print(json.dumps(report))
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f, indent=2)
    return report


if __name__ == "__main__":
    main()
