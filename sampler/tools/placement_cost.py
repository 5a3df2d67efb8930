"""What each graph placement needs on Dataflow: memory per SDK process, machine, shuffle, cost.

A planning model, not a measurement on Dataflow. Its rates are this project's local
measurements (docs/BENCHMARKS.md, "Placements"; docs/benchmarks-history.md, "Placements at
scale"; 2 SDK worker processes, MAG-shaped graphs with 128-dim paper features):

- `worker` holds the graph once per machine: one SDK process builds it from the part files the
  workers read and writes it as a snapshot that every process of the machine maps
  (sampler/beam/sample/snapshot.py). The builder's peak RSS was 1.29 GB at 0.474 GB of tables
  (200k papers, 2 processes, 2026-11-27) and 0.56 GB at 0.114 GB (50k), 1.45 GB for the 200k
  graph in Parquet (0.136 GB of files, 0.476 GB TFRecord-equivalent) and 3.58 GB for an
  ogbn-mag-sized one (736k papers, 20.5M edges, 0.485 GB of Parquet, 1.77 GB equivalent):
  within 0.6 GB + 2.0 x the tables (1.55, 0.83, 1.55 and 4.14 GB). The snapshot was
  0.54-0.55 x the tables; each other process 0.53-0.64 GB RSS, the snapshot pages it touched
  included. A machine holds the builder and its other processes,
  or later the snapshot and all of its processes. It shuffles 0.01 to 0.85 x the output.
  (Before the snapshot every process held the graph: 0.6 GB + 3.1 x the tables each.)
- `topology` holds the graph without node features, the same 3.1 x applied to the tables less
  their feature bytes, plus a working set (feature rows, the fill of a part): 0.78, 1.20 and
  1.36 GB measured at those three sizes, within 0.6 GB + 3.1 x its tables + 0.6 GB; it
  shuffles 0.45 to 0.96 x the output (the sampled topology to the fill, the feature rows
  back) and took 1.42 x, 1.61 x and 1.35 x the `worker` time.
- `sharded` holds one node shard's adjacency and rows at a time (3.1 x tables / shards)
  plus the frontier and bucket pieces: 1.49, 2.34 and 1.98 GB measured before its memory
  bound, within 0.6 GB + 1.8 GB. The working sets grow with a bucket's seeds (seeds / --num_buckets):
  a run now raises --num_buckets and --num_shards to fit --worker_memory_mb
  (sampler/tools/sharded_bound.py; 0.74-0.81 GB measured at 50k-200k papers within 850 MB).
  It shuffles 2.0 to 2.3 x the output (2.2 x at 200k papers); its SDK workers took
  4.2 x (100k) and 4.6 x (200k) the `worker` placement's SDK CPU (loaded 2-core
  VM; the local runner's own shuffle CPU left out, Dataflow's shuffle service does that).

Table bytes here are TFRecord-equivalent (sampler.io.graph_tables.size_estimates scales CSV
and Parquet files to the TFRecord bytes of the same rows). These are the runs after
`pipelines.beam_patches.streamed_inputs` (the local runner had sent each worker process its whole share of
a stage's input at once, which had tripled their memory).

Python on Dataflow runs one SDK process per vCPU: a machine fits `topology` and `sharded` when
its memory per vCPU holds one process, and `worker` when its memory holds the builder and the
machine's other processes, and the snapshot and all of them. A graph too large for that can
still run `worker` or `topology` with one SDK process per VM
(`--experiments=no_use_multiple_sdk_containers`, threads share the graph) on a machine whose
whole memory holds it; that process runs Python on about one core at a time (the GIL), so the
model bills all of the VM's vCPUs for each CPU-hour (a pessimistic bound: numpy releases the
GIL in part). Prices are Dataflow batch list prices
(us-central1) assumed here: check the pricing page for yours.
"""

from __future__ import annotations

import dataclasses

GB = 1e9
BASE_PROCESS_GB = 0.6  # an SDK process with Python, Beam, numpy, pyarrow and a bucket
RSS_PER_TABLE_BYTE = 3.1  # SDK process RSS growth per byte of table files held
WORKER_BUILD_PER_TABLE_BYTE = 2.0  # the process that builds the worker placement's snapshot
SNAPSHOT_PER_TABLE_BYTE = 0.6  # the worker placement's snapshot, mapped once per machine
TOPOLOGY_WORKING_SET_GB = 0.6  # topology's working set above worker's (see above)
SHARDED_WORKING_SET_GB = 1.8  # sharded's frontier and bucket pieces (see above)
SHUFFLE_PER_OUTPUT = {"worker": 0.1, "topology": 1.0, "sharded": 2.2}
TIME_FACTOR = {"worker": 1.0, "topology": 1.4, "sharded": 4.6}
# Dataflow batch list prices (us-central1) as of the date they were written down here; not
# checked against the pricing page since (this project's machines have no network).
PRICES_AS_OF = "2026-11-23"
VCPU_HOUR_USD = 0.056
GB_HOUR_USD = 0.003557
SHUFFLE_GB_USD = 0.011
MACHINES = (  # (name, vCPUs, GB), smallest memory per vCPU first within a size
    ("n2-standard-4", 4, 16),
    ("n2-highmem-4", 4, 32),
    ("n2-standard-8", 8, 32),
    ("n2-highmem-8", 8, 64),
    ("n2-highmem-16", 16, 128),
    ("n2-highmem-32", 32, 256),
    ("n2-highmem-64", 64, 512),
    ("n2-highmem-96", 96, 768),
    ("m1-ultramem-160", 160, 3844),
)


@dataclasses.dataclass(frozen=True)
class PlacementCost:
    placement: str
    process_gb: float  # peak memory of one SDK process (worker: the snapshot's builder)
    snapshot_gb: float  # worker: the graph, once per machine; else 0
    machine: str  # "" when no machine holds one process
    processes_per_vm: str  # "one per vCPU" or "one per VM"
    vcpu_hours: float  # CPU time
    billed_vcpu_hours: float  # vCPUs paid for: CPU time x the VM's vCPUs when one per VM
    shuffle_gb: float
    side_input_gb: float  # read by every SDK process
    cost_usd: float


def process_gb(placement: str, table_bytes: float, topology_bytes: float, num_shards: int):
    """The largest SDK process's peak memory in GB, from the measured rates."""
    if placement == "worker":
        return BASE_PROCESS_GB + WORKER_BUILD_PER_TABLE_BYTE * table_bytes / GB
    if placement == "topology":
        held = RSS_PER_TABLE_BYTE * topology_bytes / GB
        return BASE_PROCESS_GB + held + TOPOLOGY_WORKING_SET_GB
    shard = RSS_PER_TABLE_BYTE * table_bytes / max(num_shards, 1) / GB
    return BASE_PROCESS_GB + shard + SHARDED_WORKING_SET_GB


def machine_gb(placement: str, process: float, table_bytes: float, processes: int) -> float:
    """The memory a machine running `processes` SDK processes needs, in GB."""
    if placement == "worker":
        building = process + (processes - 1) * BASE_PROCESS_GB
        sampling = SNAPSHOT_PER_TABLE_BYTE * table_bytes / GB + processes * BASE_PROCESS_GB
        return max(building, sampling)
    return processes * process


def _machine(needs) -> tuple[str, str, float, int]:
    """(machine, processes per VM, GB per vCPU, vCPUs billed per CPU) for `needs(processes)`,
    the GB a machine running that many SDK processes needs."""
    for name, vcpus, gb in MACHINES:
        if gb >= needs(vcpus):
            return name, "one per vCPU", gb / vcpus, 1
    for name, vcpus, gb in MACHINES:
        if gb >= needs(1):
            return name, "one per VM", gb / vcpus, vcpus
    return "", "", 0.0, 0


def placement_costs(
    table_bytes: float,
    topology_bytes: float,
    output_bytes: float,
    worker_vcpu_seconds: float,
    num_shards: int = 1024,
) -> list[PlacementCost]:
    """Per placement: memory, machine, vCPU-hours, shuffle and list-price cost of one run."""
    out = []
    for placement in ("worker", "topology", "sharded"):
        need = process_gb(placement, table_bytes, topology_bytes, num_shards)
        machine, per_vm, gb_per_vcpu, billed = _machine(
            lambda n, p=placement, need=need: machine_gb(p, need, table_bytes, n)
        )
        snapshot = SNAPSHOT_PER_TABLE_BYTE * table_bytes / GB if placement == "worker" else 0.0
        vcpu_hours = worker_vcpu_seconds * TIME_FACTOR[placement] / 3600
        shuffle = SHUFFLE_PER_OUTPUT[placement] * output_bytes / GB
        side = topology_bytes / GB if placement == "topology" else 0.0
        paid = vcpu_hours * billed
        cost = (
            paid * (VCPU_HOUR_USD + gb_per_vcpu * GB_HOUR_USD) + shuffle * SHUFFLE_GB_USD
            if machine
            else float("nan")
        )
        out.append(
            PlacementCost(
                placement, need, snapshot, machine, per_vm, vcpu_hours, paid, shuffle, side, cost
            )
        )
    return out


def cost_lines(costs: list[PlacementCost]) -> list[str]:
    """The estimate CLI's lines, one per placement."""
    lines = ["placements (planning model, sampler/tools/placement_cost.py):"]
    for c in costs:
        where = f"{c.machine}, SDK processes {c.processes_per_vm}" if c.machine else "no machine"
        cost = f"~${c.cost_usd:,.2f}" if c.machine else "-"
        once = f" the graph once per machine ({c.snapshot_gb:,.1f} GB);" if c.snapshot_gb else ""
        lines.append(
            f"  {c.placement:9s} {c.process_gb:8,.1f} GB per process ({where});{once}"
            f" {c.vcpu_hours:,.1f} CPU-h ({c.billed_vcpu_hours:,.0f} vCPU-h billed),"
            f" shuffle {c.shuffle_gb:,.1f} GB,"
            f" side inputs {c.side_input_gb:,.1f} GB per process; {cost}"
        )
    return lines
