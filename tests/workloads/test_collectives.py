"""All-reduce bandwidth check: the nccl-tests formulas, the verdict, and real runs over
gloo with small messages."""

from __future__ import annotations

import json

import pytest

from tests.workloads.launch import torchrun
from workloads.collectives.allreduce import (
    EXIT_OK,
    EXIT_SLOW,
    EXIT_WRONG_RESULT,
    MIB,
    Measurement,
    bus_bandwidth,
    judge,
    message_sizes,
)


def test_default_sizes_run_from_one_mib_to_one_gib():
    sizes = message_sizes(MIB, 1024 * MIB)
    assert sizes[0] == 1 << 20 and sizes[-1] == 1 << 30 and len(sizes) == 11


@pytest.mark.parametrize("ranks, factor", [(2, 1.0), (8, 1.75), (16, 1.875)])
def test_bus_bandwidth_is_algorithm_bandwidth_times_2_n_minus_1_over_n(ranks, factor):
    assert bus_bandwidth(100.0, ranks) == pytest.approx(100.0 * factor)


def m(busbw, correct=True):
    return Measurement(MIB, MIB // 4, "float32", 1.0, busbw, busbw, correct)


def test_verdict_gates_on_the_peak_bus_bandwidth():
    results = [m(120.0), m(470.0), m(485.0)]
    verdict = judge(results, threshold_gbps=300.0)
    assert verdict.exit_code == EXIT_OK
    assert verdict.peak_busbw_gbps == 485.0 and verdict.avg_busbw_gbps == pytest.approx(358.33, rel=1e-3)
    assert verdict.line.startswith("PASS: peak bus bandwidth 485.00 GB/s, threshold 300.00 GB/s")


def test_tcp_speeds_fail():
    verdict = judge([m(3.0), m(11.5)], threshold_gbps=300.0)
    assert verdict.exit_code == EXIT_SLOW
    assert verdict.line.startswith("FAIL: peak bus bandwidth 11.50 GB/s, threshold 300.00 GB/s")


def test_a_wrong_result_fails_whatever_the_speed():
    verdict = judge([m(500.0), m(500.0, correct=False)], threshold_gbps=300.0)
    assert verdict.exit_code == EXIT_WRONG_RESULT
    assert verdict.line == "FAIL: all-reduce returned wrong values"


@pytest.mark.slow
def test_two_ranks_pass_a_low_threshold():
    proc = torchrun(2, "workloads.collectives", "--max-bytes", str(2 * MIB), "--iters", "3", "--warmup", "1",
                    "--min-busbw-gbps", "0.001", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    rows = [r for r in lines if r["event"] == "allreduce"]
    assert [r["size_bytes"] for r in rows] == [MIB, 2 * MIB]
    assert all(r["correct"] for r in rows)
    assert all(r["busbw_gbps"] == pytest.approx(r["algbw_gbps"]) for r in rows)  # 2 ranks: factor 1
    verdict = [r for r in lines if r["event"] == "verdict"][0]
    assert verdict["exit_code"] == EXIT_OK and verdict["threshold_gbps"] == 0.001


@pytest.mark.slow
def test_two_ranks_fail_an_unreachable_threshold():
    proc = torchrun(2, "workloads.collectives", "--max-bytes", str(MIB), "--iters", "2", "--warmup", "1",
                    "--min-busbw-gbps", "100000")
    assert proc.returncode != 0
    assert "FAIL: peak bus bandwidth" in proc.stdout
    assert "threshold 100000.00 GB/s" in proc.stdout
