"""A Dataflow job projected from a measured run: machine type, workers, hours and dollars.

The inputs are a run's `cost` block (run_summary.json; pipelines/reporting/cost.py): CPU
seconds, bytes of records and bytes shuffled per subgraph, and the largest SDK worker's peak
RSS. The projection, for `num_seeds` subgraphs:

    vCPU-hours = seeds x CPU-s per subgraph x cpu_scale / 3600
    output     = seeds x record bytes per subgraph x bytes_scale
    shuffle    = seeds x shuffled bytes per subgraph x bytes_scale
    workers    = ceil(vCPU-hours / (target hours x vCPUs per worker))
    hours      = vCPU-hours / (workers x vCPUs per worker)
    dollars    = vCPU-hours x (vCPU-hour price + GB per vCPU x GB-hour price)
                 + shuffle GB x Dataflow Shuffle price per GB

Python on Dataflow runs one SDK process per vCPU, so a machine type holds the run when its
memory per vCPU holds the largest SDK worker's peak RSS (measured on the run's graph: a
larger graph needs the placement model, sampler/tools/placement_cost.py, or a `sharded` run
bounded by --worker_memory_mb). The CPU per subgraph of the run includes its fixed costs
(start-up, reading and building the graph), so a small run overstates it; `marginal` takes
them out with a second run on fewer seeds. Left out: Dataflow's
worker start-up (3-5 minutes per job), Persistent Disk, and autoscaling. The prices are those
of sampler/tools/placement_cost.py (PRICES_AS_OF).
"""

from __future__ import annotations

import dataclasses
import math

from sampler.errors import UserError
from sampler.tools.placement_cost import (
    GB_HOUR_USD,
    PRICES_AS_OF,
    SHUFFLE_GB_USD,
    VCPU_HOUR_USD,
)


def _family(prefix: str, gb_per_vcpu: float, sizes) -> dict[str, tuple[int, float]]:
    return {f"{prefix}-{n}": (n, round(n * gb_per_vcpu, 2)) for n in sizes}


# (vCPUs, GB) of the Compute Engine machine types Dataflow runs on (predefined types).
MACHINE_TYPES = {
    "n1-standard-1": (1, 3.75),
    **_family("n1-standard", 3.75, (2, 4, 8, 16, 32, 64, 96)),
    **_family("n1-highmem", 6.5, (2, 4, 8, 16, 32, 64, 96)),
    **_family("n2-standard", 4.0, (2, 4, 8, 16, 32, 48, 64, 80, 96, 128)),
    **_family("n2-highmem", 8.0, (2, 4, 8, 16, 32, 48, 64, 80, 96, 128)),
}
# Picked in this order when --machine_type is not given: the first that holds the worker.
DEFAULT_MACHINES = ("n1-standard-4", "n1-highmem-4", "n2-highmem-4", "n2-highmem-8")


@dataclasses.dataclass(frozen=True)
class Projection:
    num_seeds: int
    bytes_scale: float
    cpu_scale: float
    cpu_seconds_per_subgraph: float  # measured, before cpu_scale
    vcpu_hours: float
    output_bytes: float
    shuffle_bytes: float
    worker_gb: float  # the largest SDK worker's peak, measured (not scaled)
    machine_type: str
    vcpus: int
    machine_gb: float
    fits: bool  # the machine's memory per vCPU holds the largest worker
    target_hours: float
    workers: int
    hours: float
    dollars: float


def machine(name: str) -> tuple[int, float]:
    """(vCPUs, GB) of a machine type; UserError naming the known ones."""
    if name not in MACHINE_TYPES:
        known = ", ".join(n for n in MACHINE_TYPES if n.endswith("-4"))
        raise UserError(f"--machine_type {name}: unknown machine type (e.g. {known})")
    return MACHINE_TYPES[name]


def pick_machine(worker_gb: float) -> str:
    """The first of DEFAULT_MACHINES whose memory per vCPU holds one SDK worker."""
    for name in DEFAULT_MACHINES:
        vcpus, gb = MACHINE_TYPES[name]
        if gb / vcpus >= worker_gb:
            return name
    return DEFAULT_MACHINES[-1]


def marginal(cost: dict, baseline: dict) -> dict:
    """`cost` with what one more subgraph costs, from a second run of the same graph, spec,
    placement and runner on fewer seeds (`baseline`): CPU, record and shuffled bytes per
    subgraph = (the run's - the baseline's) / (their subgraphs' difference), so that the fixed
    costs (start-up, the graph's build) drop out; `fixed_cpu_seconds` is what they were."""
    extra = cost["subgraphs"] - baseline["subgraphs"]
    if extra <= 0:
        raise UserError(
            f"--baseline_run: {baseline['subgraphs']:,} subgraphs, not fewer than the run's"
            f" {cost['subgraphs']:,}; give the run on fewer seeds as --baseline_run"
        )
    cpu = (cost["worker_cpu_seconds"] - baseline["worker_cpu_seconds"]) / extra
    if cpu <= 0:
        raise UserError(
            "--baseline_run: the run's CPU does not grow with its seeds over the baseline's;"
            " compare runs of the same graph, spec, placement and runner"
        )
    out = {**cost, "cpu_seconds_per_subgraph": cpu}
    for total, per in (
        ("output_bytes", "output_bytes_per_subgraph"),
        ("shuffle_bytes", "shuffle_bytes_per_subgraph"),
    ):
        out[per] = max(0.0, (cost[total] - baseline[total]) / extra)
    out["fixed_cpu_seconds"] = baseline["worker_cpu_seconds"] - baseline["subgraphs"] * cpu
    return out


def project(
    cost: dict,
    num_seeds: int,
    bytes_scale: float = 1.0,
    cpu_scale: float | None = None,
    machine_type: str | None = None,
    target_hours: float = 1.0,
) -> Projection:
    """The Dataflow job for `num_seeds` subgraphs from a run's `cost` block (module doc);
    `cpu_scale` defaults to `bytes_scale` (CPU taken as growing with the bytes: an upper bound
    when only the features grow)."""
    cpu_scale = bytes_scale if cpu_scale is None else cpu_scale
    per_cpu = float(cost["cpu_seconds_per_subgraph"])
    vcpu_hours = num_seeds * per_cpu * cpu_scale / 3600
    output = num_seeds * float(cost["output_bytes_per_subgraph"]) * bytes_scale
    shuffle = num_seeds * float(cost["shuffle_bytes_per_subgraph"] or 0.0) * bytes_scale
    worker_gb = float(cost["largest_worker_peak_rss_mb"] or 0.0) / 1000
    name = machine_type or pick_machine(worker_gb)
    vcpus, gb = machine(name)
    workers = max(1, math.ceil(vcpu_hours / (target_hours * vcpus)))
    hours = vcpu_hours / (workers * vcpus)
    dollars = vcpu_hours * (VCPU_HOUR_USD + gb / vcpus * GB_HOUR_USD) + shuffle / 1e9 * (
        SHUFFLE_GB_USD
    )
    return Projection(
        num_seeds, bytes_scale, cpu_scale, per_cpu, vcpu_hours, output, shuffle, worker_gb,
        name, vcpus, gb, gb / vcpus >= worker_gb, target_hours, workers, hours, dollars,
    )  # fmt: skip


def _gb(size: float) -> str:
    gb = size / 1e9
    return f"{gb:,.1f} GB" + (f" ({gb / 1000:,.1f} TB)" if gb >= 1000 else "")


def projection_lines(p: Projection) -> list[str]:
    """The estimate CLI's lines, with the formula and its numbers."""
    per_vcpu = p.machine_gb / p.vcpus
    holds = "holds" if p.fits else "does NOT hold"
    return [
        f"projection for {p.num_seeds:,} seeds (bytes x{p.bytes_scale:g}, CPU x{p.cpu_scale:g}):",
        f"  vCPU-hours = seeds x CPU-s per subgraph x CPU scale / 3600"
        f" = {p.num_seeds:,} x {p.cpu_seconds_per_subgraph:.6f} x {p.cpu_scale:g} / 3600"
        f" = {p.vcpu_hours:,.2f}",
        f"  output = seeds x bytes per subgraph x bytes scale = {_gb(p.output_bytes)};"
        f" shuffle = {_gb(p.shuffle_bytes)}",
        f"  machine type: {p.machine_type} ({p.vcpus} vCPUs, {p.machine_gb:g} GB: {per_vcpu:.2f}"
        f" GB per vCPU {holds} the largest SDK worker's {p.worker_gb:.2f} GB)",
        f"  workers = ceil(vCPU-hours / (target hours x vCPUs)) = ceil({p.vcpu_hours:,.2f} /"
        f" ({p.target_hours:g} x {p.vcpus})) = {p.workers:,}",
        f"  hours = vCPU-hours / (workers x vCPUs) = {p.hours:,.2f}",
        f"  dollars = vCPU-hours x (${VCPU_HOUR_USD} + {per_vcpu:.2f} GB x ${GB_HOUR_USD})"
        f" + shuffle GB x ${SHUFFLE_GB_USD} = ${p.dollars:,.2f}",
        f"dataflow: {p.workers:,} x {p.machine_type} for {p.hours:,.2f} h,"
        f" {p.vcpu_hours:,.2f} vCPU-hours, ${p.dollars:,.2f} at list price",
        f"prices: Dataflow batch list prices, us-central1, as of {PRICES_AS_OF}"
        " (sampler/tools/placement_cost.py); left out: worker start-up (3-5 min a job),"
        " Persistent Disk, autoscaling",
    ]
