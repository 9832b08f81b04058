"""The smoke client over a real gRPC connection to a Triton-protocol server."""

from __future__ import annotations

import pytest

from tests.workloads.serve.conftest import VOCAB
from tests.workloads.serve.fake_triton import FakeTriton, serve
from workloads.serve.client import connect, smoke_test


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
    assert result.shape == (4, 16, VOCAB) and len(result.latencies_ms) == 3
    assert servicer.requests == 4  # one warm-up round plus three timed ones
    assert result.summary().startswith("ok: gpt batch 4 x 16 tokens -> [4, 16, 256], p50 ")


def test_wrong_answer_shape_fails(triton):
    _, client = triton(truncate_vocab=True)
    result = smoke_test(client, "gpt", batch_size=2, sequence=8, rounds=1)
    assert not result.ok
    assert result.problems == ("answer shape [2, 8, 255] is not [2, 8, 256]",)


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
