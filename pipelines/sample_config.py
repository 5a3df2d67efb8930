"""The flags of `pipelines.sample`, parsed once into a frozen SampleConfig, and the checks of
them that need no input (pipelines.sample.load runs them, then loads the schema and plan)."""

from __future__ import annotations

import argparse
import dataclasses

from pipelines import cli, flags
from pipelines.runtime.runner import output_shards
from sampler.errors import UserError
from sampler.sample.plan import EDGE, NODE, SamplingPlan

# The --help text of `python -m pipelines.sample`.
DESCRIPTION = """Samples one GraphTensor tf.Example per seed from a Unigraph, on any Beam runner.

Drop-in for TF-GNN's `tfgnn_graph_sampler`: same flags, plus --seed. `load(argv)` parses
the flags once into a frozen SampleConfig (parse_known_args: every flag this CLI does not
define goes to Beam's PipelineOptions), loads the schema and plan once and validates them.
The pipeline is built by `sampler.beam.sample.graph_tensors.sample_graph_tensors`, the code path of
the library entry point `sampler.beam.SampleGraphTensors`.

  python -m pipelines.sample --graph_schema G --sampling_spec S \\
      --output_samples out/samples@8 [--input_seeds T] [--edge_aggregation_method node]
"""


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.sample",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=cli.guide("sample"),
    )
    parser.add_argument(
        "--graph_schema", required=True, help="GraphSchema pbtxt, or a directory holding one."
    )
    parser.add_argument("--sampling_spec", required=True, help="SamplingSpec pbtxt.")
    parser.add_argument(
        "--input_seeds",
        help="Table whose #id column lists the seeds (default: every node of the seed set).",
    )
    parser.add_argument(
        "--output_samples",
        required=True,
        help="Output path, or a sharded pattern such as out/samples@8.",
    )
    parser.add_argument("--edge_aggregation_method", choices=[EDGE, NODE], default=EDGE)
    parser.add_argument(
        "--seed_edge_set",
        default=None,
        help="Link prediction (a spec with symmetric_link_seed_op): the edge set whose edges"
        " are the seeds. --input_seeds then lists #source,#target pairs (default: every edge).",
    )
    parser.add_argument(
        "--negatives_per_seed",
        type=int,
        default=0,
        help="Link prediction: K examples with label 0 per seed edge, each with a uniformly"
        " random target from the target node set (see docs/link-prediction.md).",
    )
    parser.add_argument(
        "--keep_seed_edges",
        action="store_true",
        help="Link prediction: keep the seed edge (both directions, reversed edge sets over its"
        " table too) in its own subgraph. Off by default because a model trained on such"
        " subgraphs learns to find the edge it should predict (label leakage).",
    )
    parser.add_argument(
        "--runner", default=None, help="Beam runner (default: local FnApiRunner, offline)."
    )
    parser.add_argument("--seed", type=int, default=0, help="Random seed: same seed, same records.")
    parser.add_argument(
        "--num_shards", type=int, default=32, help="Node shards for adjacency and lookups."
    )
    parser.add_argument("--num_buckets", type=int, default=32, help="Sample buckets for assembly.")
    parser.add_argument(
        "--graph_placement",
        choices=["auto", "worker", "topology", "sharded"],
        default="auto",
        help="worker: the whole graph, once per machine (a snapshot every worker maps), and seeds"
        " sampled completely (fastest; the graph must fit a machine). topology: every worker"
        " holds the graph without node features, samples the same way, and the sampled nodes'"
        " features are joined once by node shard (the topology must fit). sharded: adjacency"
        " and nodes stay sharded and frontiers are joined to them hop by hop (any size,"
        " slowest). auto: the first that fits --worker_memory_mb. All give identical records.",
    )
    parser.add_argument(
        "--worker_memory_mb",
        "--worker_graph_limit_mb",
        dest="worker_memory_mb",
        type=float,
        default=4096,
        help="Memory budget (MB) of one SDK worker process for --graph_placement=auto: worker if"
        " the process that builds the whole graph (mapped once per machine) fits, else topology"
        " if one holding the graph without node features fits, else sharded. A process's need"
        " is predicted from the table file sizes (TFRecord-equivalent) with measured rates"
        " (worker ~0.6 GB + 2.0x the tables, topology ~0.6 GB + 3.1x the tables it holds"
        " + 0.6 GB; sampler/tools/placement_cost.py)."
        " (--worker_graph_limit_mb: old name.)",
    )
    parser.add_argument(
        "--progress_interval",
        type=float,
        default=10.0,
        help="Seconds between progress lines on stderr (redrawn every second on a terminal);"
        " 0 turns them off.",
    )
    parser.add_argument(
        "--sampling_threads",
        type=int,
        default=None,
        help="Threads that sample and encode chunks of seeds side by side, in the process of"
        " --runner InMemory (default: one per core) or in each SDK worker process of the"
        " `worker` placement (default 1: Dataflow runs one SDK process per vCPU); 0: one per"
        " core. The records are the same for any number.",
    )
    parser.add_argument(
        "--max_bad_records",
        type=int,
        default=0,
        help="Input rows that cannot be read are skipped and written to"
        " <output dir>/bad_records-*.jsonl; more than this many fail the run.",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="Replace the output of an earlier run (its files are deleted first).",
    )
    parser.add_argument(
        "--strict",
        default="",
        help="Comma-separated graph checks that fail the run instead of being counted:"
        " dangling_edges,duplicate_ids,missing_seeds,self_loops,parallel_edges,empty_sets"
        " (or all). See docs/troubleshooting.md.",
    )
    return parser


@dataclasses.dataclass(frozen=True)
class SampleConfig:
    """Every flag of this CLI, parsed once (the field names are the flags')."""

    graph_schema: str
    sampling_spec: str
    input_seeds: str | None
    output_samples: str
    edge_aggregation_method: str
    seed_edge_set: str | None
    negatives_per_seed: int
    keep_seed_edges: bool
    runner: str | None
    seed: int
    num_shards: int
    num_buckets: int
    graph_placement: str
    worker_memory_mb: float
    progress_interval: float
    sampling_threads: int | None
    max_bad_records: int
    overwrite: bool
    strict: str


def parse_args(argv) -> tuple[SampleConfig, list[str]]:
    """(this CLI's flags, the rest: Beam's PipelineOptions); a flag that neither defines is a
    UserError (pipelines.flags)."""
    args, beam_args = flags.parse(make_parser(), argv, RUNNER_RULES)
    return SampleConfig(**vars(args)), beam_args


# The flags that set up the Beam pipeline: --runner InMemory refuses them (pipelines.flags).
RUNNER_RULES = flags.RunnerRules(
    in_memory_ignores=(
        "num_shards", "num_buckets", "graph_placement", "worker_memory_mb"
    ),
)  # fmt: skip


def check_numbers(config: SampleConfig) -> None:
    """Every count, size and seed in its range (pipelines.flags), in one line each."""
    flags.check_bounds(config, flags.SAMPLE_BOUNDS)
    output_shards(config.output_samples)  # its shard count: 1..flags.MAX_OUTPUT_SHARDS


def check_link_flags(plan: SamplingPlan, config: SampleConfig) -> None:
    """Link flags need a link seed op."""
    if plan.link is None:
        if config.negatives_per_seed or config.keep_seed_edges:
            raise UserError(
                "--negatives_per_seed and --keep_seed_edges need a symmetric_link_seed_op"
            )
        return
