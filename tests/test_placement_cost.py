"""The placement planning model (sampler.tools.placement_cost), against hand-computed values."""

from __future__ import annotations

import math

import pytest

from sampler.tools import placement_cost as pc


def test_memory_per_process_follows_the_measured_rates():
    assert pc.process_gb("worker", 1e9, 0.5e9, 16) == pytest.approx(0.6 + 3.1)
    assert pc.process_gb("topology", 1e9, 0.5e9, 16) == pytest.approx(0.6 + 1.55 + 0.6)
    assert pc.process_gb("sharded", 16e9, 8e9, 16) == pytest.approx(0.6 + 3.1 + 1.8)


def test_machines_one_process_per_vcpu_then_one_per_vm_then_none():
    # 1 GB of tables: 3.7 GB per process fits n2-standard-4's 4 GB per vCPU
    small = {c.placement: c for c in pc.placement_costs(1e9, 0.5e9, 10e9, 3600.0)}
    worker = small["worker"]
    assert (worker.machine, worker.processes_per_vm) == ("n2-standard-4", "one per vCPU")
    assert worker.billed_vcpu_hours == pytest.approx(1.0)
    # 1 CPU-hour at $0.056 + 4 GB x $0.003557, plus 0.1 x 10 GB of shuffle at $0.011
    assert worker.cost_usd == pytest.approx(0.056 + 4 * 0.003557 + 1.0 * 0.011)
    assert small["topology"].vcpu_hours == pytest.approx(1.4)
    assert small["sharded"].shuffle_gb == pytest.approx(25.0)
    # 40 GB of tables: 124.6 GB per process, more than any machine's memory per vCPU;
    # n2-highmem-16 (128 GB) holds one process, and all 16 vCPUs are billed
    big = pc.placement_costs(40e9, 4e9, 10e9, 3600.0)[0]
    assert (big.machine, big.processes_per_vm) == ("n2-highmem-16", "one per VM")
    assert big.billed_vcpu_hours == pytest.approx(16.0)
    # 2 TB of tables: no machine holds a copy
    none = pc.placement_costs(2e12, 1e12, 10e9, 3600.0)[0]
    assert none.machine == "" and math.isnan(none.cost_usd)
    assert "no machine" in pc.cost_lines([none])[1]
