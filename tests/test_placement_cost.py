"""The placement planning model (sampler.tools.placement_cost), against hand-computed values."""

from __future__ import annotations

import math

import pytest

from sampler.tools import placement_cost as pc


def test_memory_per_process_follows_the_measured_rates():
    # worker: the process that builds the snapshot, 0.6 GB + 2.0 x the tables
    assert pc.process_gb("worker", 1e9, 0.5e9, 16) == pytest.approx(0.6 + 2.0)
    assert pc.process_gb("topology", 1e9, 0.5e9, 16) == pytest.approx(0.6 + 1.55 + 0.6)
    assert pc.process_gb("sharded", 16e9, 8e9, 16) == pytest.approx(0.6 + 3.1 + 1.8)


def test_a_machine_holds_the_worker_graph_once_and_other_placements_once_per_process():
    # 10 GB of tables, 8 processes: building, 20.6 + 7 x 0.6 = 24.8 GB; sampling, the 6 GB
    # snapshot + 8 x 0.6 = 10.8 GB
    assert pc.machine_gb("worker", 20.6, 10e9, 8) == pytest.approx(24.8)
    # 1 GB of tables, 8 processes: building 2.6 + 4.2 = 6.8; sampling 0.6 + 4.8 = 5.4
    assert pc.machine_gb("worker", 2.6, 1e9, 8) == pytest.approx(6.8)
    # 100 GB of tables, 160 processes: the builder and the others (200.6 + 159 x 0.6 = 296)
    # need more than the snapshot and all the processes (60 + 96 = 156); the larger wins
    assert pc.machine_gb("worker", 200.6, 100e9, 160) == pytest.approx(max(296.0, 156.0))
    assert pc.machine_gb("topology", 4.3, 10e9, 8) == pytest.approx(8 * 4.3)


def test_machines_one_process_per_vcpu_then_one_per_vm_then_none():
    # 1 GB of tables: the worker machine needs 2.6 + 3 x 0.6 = 4.4 GB with 4 processes,
    # which n2-standard-4 (16 GB) holds
    small = {c.placement: c for c in pc.placement_costs(1e9, 0.5e9, 10e9, 3600.0)}
    worker = small["worker"]
    assert (worker.machine, worker.processes_per_vm) == ("n2-standard-4", "one per vCPU")
    assert worker.billed_vcpu_hours == pytest.approx(1.0)
    assert worker.snapshot_gb == pytest.approx(0.6) and worker.side_input_gb == 0.0
    # 1 CPU-hour at $0.056 + 4 GB x $0.003557, plus 0.1 x 10 GB of shuffle at $0.011
    assert worker.cost_usd == pytest.approx(0.056 + 4 * 0.003557 + 1.0 * 0.011)
    assert small["topology"].vcpu_hours == pytest.approx(1.4)
    assert small["topology"].snapshot_gb == 0.0
    assert small["sharded"].shuffle_gb == pytest.approx(22.0)
    # 60 GB of tables: the builder needs 120.6 GB; n2-highmem-16 (128 GB) would need
    # 120.6 + 15 x 0.6 = 129.6, n2-highmem-32 (256 GB) 120.6 + 31 x 0.6 = 139.2
    worker = pc.placement_costs(60e9, 6e9, 10e9, 3600.0)[0]
    assert (worker.machine, worker.processes_per_vm) == ("n2-highmem-32", "one per vCPU")
    # a 40 GB topology: 0.6 + 124 + 0.6 = 125.2 GB per process, more than any machine's memory
    # per vCPU; n2-highmem-16 (128 GB) holds one process, and all 16 vCPUs are billed
    topology = pc.placement_costs(80e9, 40e9, 10e9, 3600.0)[1]
    assert (topology.machine, topology.processes_per_vm) == ("n2-highmem-16", "one per VM")
    assert topology.billed_vcpu_hours == pytest.approx(16.0 * 1.4)
    # 2 TB of tables: no machine holds the builder (4,000.6 GB)
    none = pc.placement_costs(2e12, 1e12, 10e9, 3600.0)[0]
    assert none.machine == "" and math.isnan(none.cost_usd)
    assert "no machine" in pc.cost_lines([none])[1]
    assert "the graph once per machine (0.6 GB)" in pc.cost_lines([small["worker"]])[1]
