"""The smoke client over a real gRPC connection to a Triton-protocol server."""

from __future__ import annotations

import numpy as np
import pytest

from tests.workloads.serve.conftest import VOCAB
from tests.workloads.serve.fake_triton import FakeTriton, serve
from workloads.serve.client import _top_k_problems, connect, smoke_test
from workloads.serve.spec import DEFAULT_TOP_K, TOP_K_IDS, TOP_K_LOGPROBS


@pytest.fixture
def triton(exported):
    """Start a fake Triton with the given misbehaviour; yields (servicer, client)."""
    started = []

    def start(**behaviour):
        servicer = FakeTriton("gpt", exported.path, VOCAB, **behaviour)
        server, address = serve(servicer)
        client = connect(address)
        started.append((server, client))
        return servicer, client

    yield start
    for server, client in started:
        client.close()
        server.stop(grace=None)


def test_healthy_model_passes(triton):
    servicer, client = triton()
    result = smoke_test(client, "gpt", batch_size=4, sequence=16, rounds=3, max_latency_ms=5000)
    assert result.ok, result.summary()
    assert result.shape == (4, DEFAULT_TOP_K) and len(result.latencies_ms) == 3
    assert servicer.requests == 4  # one warm-up round plus three timed ones
    assert result.summary().startswith(f"ok: gpt batch 4 x 16 tokens -> [4, {DEFAULT_TOP_K}], p50 ")


def test_the_client_asks_for_the_top_k_only(triton):
    servicer, client = triton()
    assert smoke_test(client, "gpt", batch_size=2, sequence=8, rounds=1).ok
    assert servicer.asked == [TOP_K_IDS, TOP_K_LOGPROBS]  # never the [B, vocab] logits


def test_wrong_answer_shape_fails(triton):
    _, client = triton(truncate_top_k=True)
    result = smoke_test(client, "gpt", batch_size=2, sequence=8, rounds=1)
    assert not result.ok
    k = DEFAULT_TOP_K
    assert result.problems == (f"answer shapes [2, {k - 1}] and [2, {k - 1}] are not [2, {k}]",)


@pytest.mark.parametrize("ids, logprobs, problem", [
    ([[3, 300]], [[-0.1, -2.0]], "answer holds token ids outside the vocabulary of 256"),
    ([[3, 4]], [[-0.1, float("nan")]], "answer holds log-probabilities that are NaN, infinite or above 0"),
    ([[3, 4]], [[0.5, -2.0]], "answer holds log-probabilities that are NaN, infinite or above 0"),
    ([[3, 4]], [[-2.0, -0.1]], "answer's top k is not ordered most likely first"),
])
def test_a_top_k_that_cannot_be_right_is_named(ids, logprobs, problem):
    found = _top_k_problems(np.array(ids, dtype=np.int64), np.array(logprobs, dtype=np.float32), (1, 2), VOCAB)
    assert found == [problem]


def test_slow_answers_fail_the_latency_budget(triton):
    _, client = triton(delay_s=0.05)
    result = smoke_test(client, "gpt", batch_size=1, sequence=4, rounds=2, max_latency_ms=20)
    assert not result.ok and result.p50_ms >= 50
    assert result.problems[0].endswith("ms is above the 20 ms budget")


def test_not_ready_and_unknown_model_fail(triton):
    _, client = triton(ready=False)
    assert smoke_test(client, "gpt").problems == ("server is not ready (/v2/health/ready)",)
    _, client = triton()
    assert smoke_test(client, "llama").problems == ("model 'llama' version latest is not ready",)


def test_unreachable_server_fails(exported):
    client = connect("127.0.0.1:1")
    try:
        result = smoke_test(client, "gpt", rounds=1)
    finally:
        client.close()
    assert not result.ok and result.problems[0].startswith("cannot reach the server: ")


def test_a_request_longer_than_the_models_context_is_refused_before_it_is_sent(triton):
    servicer, client = triton(max_sequence=32)
    result = smoke_test(client, "gpt", batch_size=2, sequence=48, rounds=2)
    assert not result.ok
    assert result.problems == ("48 tokens is more than model 'gpt' takes (max_sequence 32 in its config.pbtxt); "
                               "send at most that many",)
    assert servicer.requests == 0
    assert smoke_test(client, "gpt", batch_size=2, sequence=32, rounds=2).ok
