"""Train a small TF-GNN node classifier on the sampling stage's output.

    python examples/train_tfgnn.py --samples 'out/samples-*' --epochs 5

Reads the output schema (`schema.pbtxt` beside the samples, written by the sampling stage)
and predicts the seed paper's `label` from its sampled neighbourhood. What users trip over,
handled here:

  * String features (`#id`) and the context (`sample_id`, `seed_id`) cannot enter Dense
    layers: they are dropped, except that a latent node set (no features, only `#id`) gets
    its initial state from an embedding of its hashed `#id`.
  * The label is a feature of the seed's node set, so every node of that set carries it:
    it is removed from all of them (not only the seed), else neighbours leak the answer.
  * Sampled edges point away from the seed (source: the node nearer the seed), so messages
    are pooled toward the seed with `receiver_tag=tfgnn.SOURCE`.
  * The seed is node 0 of its node set in each subgraph: `ReadoutFirstNode`.

Prints one JSON line (per-epoch loss and validation accuracy, the majority-class baseline)
and writes it to --report when given. Every 5th record is held out for validation, or, with
--validate_from T on temporal samples (docs/sampling.md, "Temporal sampling"), every record
whose context `seed_time` is T or later: train on the past, validate on the future.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # before TensorFlow is imported
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
import tensorflow_gnn as tfgnn  # noqa: E402

DENSE_INPUTS = (tf.float32, tf.float64)  # ints are often ids or categories: not fed raw


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", required=True, help="Glob of the sampled TFRecord files.")
    parser.add_argument(
        "--schema", help="The output schema (default: schema.pbtxt beside the samples)."
    )
    parser.add_argument("--seed_node_set", default="paper", help="The seed op's node set.")
    parser.add_argument("--label", default="label", help="Integer feature of the seed set.")
    parser.add_argument("--num_classes", type=int, help="Default: the largest label + 1.")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--units", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2, help="GraphUpdate rounds.")
    parser.add_argument("--id_buckets", type=int, default=4096, help="Hash buckets for #id.")
    parser.add_argument("--learning_rate", type=float, default=1e-2)
    parser.add_argument("--report", help="Also write the JSON report to this path.")
    parser.add_argument(
        "--validate_from",
        type=float,
        help="Temporal samples: validate on the records whose seed_time is at least this.",
    )
    return parser.parse_args(argv)


def input_features(schema, seed_set: str, label: str) -> dict[str, list[str]]:
    """Per node set, the features a Dense layer can take: float, never the label."""
    keep = {}
    for name, node_set in schema.node_sets.items():
        keep[name] = [
            feature
            for feature, spec in sorted(node_set.features.items())
            if tf.dtypes.as_dtype(spec.dtype) in DENSE_INPUTS
            and not (name == seed_set and feature == label)
        ]
    return keep


def make_datasets(files, graph_spec, args, features):
    """(train, validation, labels) datasets of (GraphTensor, seed label)."""

    def parse(serialized):
        graph = tfgnn.parse_example(graph_spec, serialized).merge_batch_to_components()
        labels = tfgnn.keras.layers.ReadoutFirstNode(
            node_set_name=args.seed_node_set, feature_name=args.label
        )(graph)
        node_sets = {}
        for name, node_set in graph.node_sets.items():
            kept = {f: tf.cast(node_set[f], tf.float32) for f in features[name]}
            if not kept:  # latent set: its hashed #id seeds an embedding
                kept = {tfgnn.HIDDEN_STATE: tf.strings.to_hash_bucket_fast(
                    node_set["#id"], args.id_buckets)}  # fmt: skip
            node_sets[name] = kept
        graph = graph.replace_features(context={}, node_sets=node_sets)
        return graph, labels

    records = tf.data.TFRecordDataset(files).enumerate()
    held_out = lambda i, _: i % 5 == 0  # noqa: E731
    if args.validate_from is not None:  # by time: the seed_time of the record's context
        key = "context/seed_time"
        dtype = graph_spec.context_spec["seed_time"].dtype
        wanted = {key: tf.io.FixedLenFeature([1], dtype)}

        def held_out(_, record):
            time = tf.io.parse_single_example(record, wanted)[key][0]
            return tf.cast(time, tf.float64) >= args.validate_from

    split = {
        "train": records.filter(lambda i, r: tf.logical_not(held_out(i, r))),
        "validation": records.filter(held_out),
    }
    return {
        name: ds.map(lambda _, r: r).batch(args.batch_size).map(parse).prefetch(2)
        for name, ds in split.items()
    }


def build_model(graph_spec, schema, features, num_classes: int, args) -> tf.keras.Model:
    units = args.units

    def dense(width=units):
        return tf.keras.layers.Dense(width, activation="relu")

    def init_state(node_set, *, node_set_name):
        if features[node_set_name]:
            parts = [node_set[f] for f in features[node_set_name]]
            parts = [p if p.shape.rank > 1 else p[:, None] for p in parts]
            flat = [tf.reshape(p, [-1, int(tf.reduce_prod(p.shape[1:]))]) for p in parts]
            return dense()(tf.concat(flat, axis=1))
        embed = tf.keras.layers.Embedding(args.id_buckets, units)
        return embed(node_set[tfgnn.HIDDEN_STATE])

    # Messages flow from each edge's target to its source: toward the seed.
    toward = {name: [] for name in schema.node_sets}
    for edge_set, spec in sorted(schema.edge_sets.items()):
        toward[spec.source].append(edge_set)

    inputs = tf.keras.layers.Input(type_spec=graph_spec)
    graph = tfgnn.keras.layers.MapFeatures(node_sets_fn=init_state)(inputs)
    for round_ in range(args.rounds):
        last = round_ == args.rounds - 1  # only the seed's state is read after it
        graph = tfgnn.keras.layers.GraphUpdate(
            node_sets={
                name: tfgnn.keras.layers.NodeSetUpdate(
                    {
                        edge_set: tfgnn.keras.layers.SimpleConv(
                            dense(), "mean", receiver_tag=tfgnn.SOURCE
                        )
                        for edge_set in edge_sets
                    },
                    tfgnn.keras.layers.NextStateFromConcat(dense()),
                )
                for name, edge_sets in toward.items()
                if edge_sets and (not last or name == args.seed_node_set)
            }
        )(graph)
    seed = tfgnn.keras.layers.ReadoutFirstNode(node_set_name=args.seed_node_set)(graph)
    logits = tf.keras.layers.Dense(num_classes)(seed)
    return tf.keras.Model(inputs, logits)


def main(argv=None) -> dict:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    files = sorted(f for f in glob.glob(args.samples) if not f.endswith((".json", ".pbtxt")))
    if not files:
        raise SystemExit(f"error: no files match --samples {args.samples}")
    schema_path = args.schema or os.path.join(os.path.dirname(files[0]), "schema.pbtxt")
    schema = tfgnn.read_schema(schema_path)
    if args.label not in schema.node_sets[args.seed_node_set].features:
        raise SystemExit(f"error: {schema_path}: {args.seed_node_set} has no '{args.label}'")
    if args.validate_from is not None and "seed_time" not in schema.context.features:
        raise SystemExit(
            f"error: {schema_path}: --validate_from needs temporal samples (seed_time)"
        )
    features = input_features(schema, args.seed_node_set, args.label)
    data = make_datasets(files, tfgnn.create_graph_spec_from_schema_pb(schema), args, features)
    train_labels = [int(v) for _, y in data["train"] for v in y.numpy()]
    val_labels = [int(v) for _, y in data["validation"] for v in y.numpy()]
    num_classes = args.num_classes or max(train_labels + val_labels) + 1
    majority = max(set(train_labels), key=train_labels.count)
    baseline = val_labels.count(majority) / max(len(val_labels), 1)

    graph_spec = data["train"].element_spec[0]
    model = build_model(graph_spec, schema, features, num_classes, args)
    model.compile(
        tf.keras.optimizers.Adam(args.learning_rate),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    history = model.fit(
        data["train"], validation_data=data["validation"], epochs=args.epochs, verbose=0
    )
    report = {
        "train_records": len(train_labels),
        "validation_records": len(val_labels),
        "num_classes": num_classes,
        "loss": [round(float(v), 4) for v in history.history["loss"]],
        "val_accuracy": [round(float(v), 4) for v in history.history["val_accuracy"]],
        "majority_baseline": round(baseline, 4),
    }
    print(json.dumps(report))
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f, indent=2)
    return report


if __name__ == "__main__":
    main()
