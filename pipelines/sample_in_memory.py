"""`pipelines.sample --runner InMemory`: the same sampling without Beam, on one machine.

The same kernels and the same records as the Beam pipeline for the same --seed;
the floor of the benchmarks and the oracle of the pipeline's tests.
"""

from __future__ import annotations

import collections
import contextlib
import time
import uuid

from pipelines.reporting import accounting
from pipelines.reporting.stage_clock import StageClock
from pipelines.runtime.runner import output_shards
from pipelines.toolkit import RowProgress
from sampler import shards
from sampler.io.files import (
    create_stream,
    delete,
    has_scheme,
    join,
    rename,
    shard_name,
    write_error,
)
from sampler.io.framed import FrameBuffers
from sampler.io.graph_tables import read_seed_pairs, read_seeds, seed_edge_keys
from sampler.io.streaming_file import write_records
from sampler.sample import in_memory, link, temporal
from sampler.sample.adjacency import make_seeds
from sampler.sample.chunk_stream import encoded_chunks
from sampler.sample.dense import densify, edge_facts
from sampler.sample.encode import encode_specs
from sampler.sample.rejected import rejected_seed_lines
from sampler.threads import cpu_count

IN_MEMORY = "InMemory"


def run(args, graph, plan, output_dir: str, clock: StageClock | None = None) -> collections.Counter:
    """Samples every seed and writes the records; returns the counters.

    `args` is the CLI's config (pipelines.sample_config.SampleConfig), parsed and validated once there;
    `graph` and `plan` are the schema and plan it loaded once. `clock` gets the time of each
    stage: read, build, seeds, sample, encode, write.
    """
    clock = clock if clock is not None else StageClock()
    start = time.time()
    dead = DeadLetters(args.max_bad_records)
    with clock("read"):
        parts = in_memory.read_tables(graph, dead.on_bad)
    if plan.link is not None:
        return _run_links(args, graph, plan, parts, start, clock, dead, output_dir)
    with clock("build"):
        mem = in_memory.build_dense_graph(graph, plan, parts)
        facts = graph_facts(graph, mem)
    with clock("seeds"):
        if args.input_seeds:
            kind = temporal.table_time_kind(plan)
            rows = read_seeds(args.input_seeds, kind, dead.seeds_on_bad)
            facts["rows_read/seeds"] = len(rows)
            seeds = make_seeds(rows.ids, rows.time)
        else:
            seeds = make_seeds(mem.node_tables[plan.seed_set].rows.ids)
        counters = collections.Counter(seeds_in=len(seeds), **facts)
        dead.account(counters, output_dir)
        if args.input_seeds:
            node_fps = mem.node_tables[plan.seed_set].rows.fp
            rejected = rejected_seed_lines(seeds, node_fps, plan.seed_set)
            accounting.write_rejected_seeds_file(rejected, output_dir)
    chunks = encoded(args, graph, plan, mem, seeds, in_memory.NodeSeedSampling())
    _write(args, chunks, counters, clock)
    counters["seconds"] = round(time.time() - start, 1)
    return counters


class DeadLetters:
    """Bad rows of the tables and the seed table, as the Beam runner accounts for them
    (sampler.beam.read): with --max_bad_records 0 the first one fails the run; above it each
    is a dead letter and counts in `bad_records/<set>` (the seed table's set is "seeds"), and
    more than the limit fails the run once every table is read, before any sampling."""

    def __init__(self, limit: int):
        self.limit = limit
        self.lines: list[str] = []
        self.counts: collections.Counter = collections.Counter()
        self.on_bad = self._add if limit else None
        self.seeds_on_bad = (lambda bad: self._add("seeds", bad)) if limit else None

    def _add(self, name: str, bad) -> None:
        self.lines.append(bad.to_json(set=name))
        self.counts[f"bad_records/{name}"] += 1

    def account(self, counters: collections.Counter, output_dir: str) -> None:
        """Writes the dead letters, counts them, and fails past the limit."""
        accounting.write_bad_records_file(self.lines, output_dir)
        counters.update(self.counts)
        accounting.check_bad_records(counters, self.limit, output_dir)


def graph_facts(graph, mem) -> dict[str, int]:
    """The counters from which pipelines.reporting.accounting.graph_issues finds a graph's issues, as the
    Beam runner counts them (sampler.beam.read, the placements' GraphFacts): rows read per
    table, duplicate node ids, edges with a missing endpoint (dropped), self-loops and
    parallel edges (of the edges kept)."""
    out: dict[str, int] = {}
    for name, info in graph.node_sets.items():
        if info.filename:
            table = mem.node_tables[name]
            out[f"rows_read/{name}"] = len(table.rows.ids) + table.duplicates
            out[f"duplicate_node_ids/{name}"] = table.duplicates
    for name in graph.edge_sets:  # the edges kept and those dropped for a missing endpoint
        read = len(mem.adjacency[name].targets) + mem.dropped_edges.get(name, 0)
        out[f"rows_read/{name}"] = read
    out.update(edge_facts(graph, mem))
    return {k: v for k, v in out.items() if v or k.startswith("rows_read/")}


def by_bucket(seeds, num_buckets: int):
    """(bucket, its seeds) in bucket order: the Beam runner's buckets (sample key % --num_buckets,
    whose default this runner keeps), so that the records are laid out over the shards as a
    Beam run lays them out (sampler.beam.sample.write): shard s holds buckets s, s + N, ...,
    in bucket order, each bucket's records in sample order. The files are the same bytes."""
    for bucket, index in shards.by_bucket(seeds.sample, num_buckets):
        yield bucket, seeds.take(index)


def encoded(args, graph, plan, mem, seeds, kernel):
    """The EncodedChunks (sampler.sample.chunk_stream) of every seed, by bucket (`by_bucket`),
    each bucket in `kernel`'s chunks (NodeSeedSampling or link.LinkSampling)."""
    randomness = in_memory.Randomness(args.seed)
    jobs = (
        (bucket, chunk)
        for bucket, part in by_bucket(seeds, args.num_buckets)
        for chunk in kernel.seed_chunks(part, in_memory.CHUNK_SIZE)
    )

    def sample(chunk, counters):
        return kernel.sample_chunk(graph, plan, mem, chunk, randomness, counters)

    specs = encode_specs(kernel.output_schema(graph.schema, plan))
    # records framed where they are encoded, each chunk one write (_write), in buffers that
    # come back, placed for the file that gets them
    count, files = threads(args), len(_shard_paths(args))
    buffers = FrameBuffers.for_threads(count)
    by_file = (lambda bucket: bucket % files) if files > 1 else None  # as _write writes them
    return encoded_chunks(jobs, sample, specs, count, framed=buffers, file_of=by_file)


def threads(args) -> int:
    """--sampling_threads; not given or 0: one per core this process may run on."""
    return args.sampling_threads or cpu_count()


def _write(args, chunks, counters, clock: StageClock) -> None:
    """Writes each encoded chunk (sampler.sample.chunk_stream) of bucket b to shard b % shards,
    in order, as the Beam runner's shards hold them (`by_bucket`); adds each chunk's counters
    and stage times (its sampling and encoding threads' CPU, this thread's for writing).

    The shards are written in a `.temp-samples-*` folder beside them and renamed to their
    final names once all are complete: a run that is killed (SIGKILL, a power loss) leaves no
    truncated shard under a final name, as the Beam runner's concatenation does not."""
    paths = _shard_paths(args)
    prefix = output_shards(args.output_samples)[0]
    folder = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
    temp = join(folder or ".", f".temp-samples-{uuid.uuid4().hex[:12]}")
    temps = [join(temp, path.rsplit("/", 1)[-1]) for path in paths]
    writers = [create_stream(path) for path in temps]
    # --progress_interval: a line on stderr per interval, as the Beam runner prints its own
    progress = RowProgress("in memory", args.progress_interval)
    failed = True
    try:
        while True:
            waited = time.perf_counter()
            chunk = next(chunks, None)
            if chunk is None:
                break
            clock.add_parts(chunk.wall, chunk.cpu, time.perf_counter() - waited)
            index = chunk.key % len(writers)
            with clock("write", thread_cpu=True), _writing(temps[index]):
                write_records(writers[index], chunk.records)
            counters.update(chunk.counters)
            counters["subgraphs"] += chunk.subgraphs
            progress("subgraphs", counters["subgraphs"])
        failed = False
    finally:
        chunks.close()  # its threads start no other chunk
        progress.done()
        with clock("write"):
            for path, writer in zip(temps, writers, strict=True):
                if failed:  # the error is raised: the others' buffers go nowhere
                    with contextlib.suppress(OSError):
                        writer.close()
                else:
                    with _writing(path):
                        writer.close()
    with clock("write"):
        for source, target in zip(temps, paths, strict=True):
            rename(source, target)
        if not has_scheme(temp):  # an object store has no folder left once its files moved
            delete([temp])


def _shard_paths(args) -> list[str]:
    """The output shards' final paths (bucket b goes to shard b % their count)."""
    prefix, num_shards, template = output_shards(args.output_samples)
    if template == "":
        return [prefix]
    return [shard_name(prefix, i, num_shards) for i in range(num_shards)]


@contextlib.contextmanager
def _writing(path: str):
    """An OS error while a shard is written (a full disk) is one line naming it (write_error)."""
    try:
        yield
    except OSError as e:
        raise write_error(path, e) from e


def _run_links(
    args, graph, plan, parts, start, clock: StageClock, dead: DeadLetters, output_dir: str
) -> collections.Counter:
    """A symmetric_link_seed_op: one example per seed edge and negative (sampler.sample.link).

    Default seeds are every edge of the seed edge set, those with a missing endpoint included
    (rejected as `seeds_not_in_node_set`, as the Beam placements do)."""
    with clock("build"):
        node_tables, adjacency = in_memory.build_tables(graph, plan, parts)
        facts = {}
        if args.input_seeds:
            edge_keys = None
            if plan.seed_time is not None:  # a pair that is no edge has no time: a bad row
                edge_keys = seed_edge_keys(*link.edge_pairs(adjacency[plan.link.edge_set]))
            kind = temporal.table_time_kind(plan)
            pairs = read_seed_pairs(args.input_seeds, dead.seeds_on_bad, kind, edge_keys)
            facts["rows_read/seeds"] = len(pairs[0])
        else:
            pairs = link.edge_pairs(adjacency[plan.link.edge_set])
        mem = densify(graph, node_tables, adjacency)
        del node_tables, adjacency
        seeds = link.make_link_seeds(*pairs)
        counters = collections.Counter(seeds_in=len(seeds), **graph_facts(graph, mem), **facts)
        dead.account(counters, output_dir)
    kernel = link.LinkSampling(args.negatives_per_seed, args.keep_seed_edges)
    _write(args, encoded(args, graph, plan, mem, seeds, kernel), counters, clock)
    counters["seconds"] = round(time.time() - start, 1)
    return counters
