"""The request logger as Envoy's external processor (shadow mode): streams of Envoy's own
ext_proc messages over a real gRPC connection, carrying KServe v2 gRPC and REST
inferences in chunks; the logger keeps the sampled ones with their outputs, under the
field policy."""

from __future__ import annotations

import json
import struct
from concurrent import futures

import grpc
import numpy as np
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc
from tritonclient.grpc import service_pb2

from workloads.monitor.ext_proc import servicer
from workloads.monitor.logger import Sink
from workloads.monitor.request_log import Batcher, FieldPolicy


def frame(message) -> bytes:
    data = message.SerializeToString()
    return struct.pack(">BI", 0, len(data)) + data


def envoy_stream(headers: dict[str, str], request: bytes, response: bytes, chunk: int = 7):
    """What Envoy sends for one stream: headers, then each body in chunks."""
    yield ep.ProcessingRequest(request_headers=ep.HttpHeaders(headers=base_pb2.HeaderMap(headers=[
        base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in headers.items()])))
    for start in range(0, len(request), chunk):
        yield ep.ProcessingRequest(request_body=ep.HttpBody(body=request[start:start + chunk],
                                                            end_of_stream=start + chunk >= len(request)))
    yield ep.ProcessingRequest(response_headers=ep.HttpHeaders())
    for start in range(0, len(response), chunk):
        yield ep.ProcessingRequest(response_body=ep.HttpBody(body=response[start:start + chunk],
                                                             end_of_stream=start + chunk >= len(response)))


def grpc_inference(ids: np.ndarray, top: np.ndarray) -> tuple[bytes, bytes]:
    request = service_pb2.ModelInferRequest(model_name="gpt", model_version="7", inputs=[
        service_pb2.ModelInferRequest.InferInputTensor(name="input_ids", datatype="INT64", shape=list(ids.shape))],
        raw_input_contents=[ids.astype(np.int64).tobytes()])
    response = service_pb2.ModelInferResponse(model_name="gpt", model_version="7", outputs=[
        service_pb2.ModelInferResponse.InferOutputTensor(name="top_k_ids", datatype="INT64", shape=list(top.shape)),
        service_pb2.ModelInferResponse.InferOutputTensor(name="top_k_logprobs", datatype="FP32",
                                                         shape=list(top.shape))],
        raw_output_contents=[top.astype(np.int64).tobytes(), np.zeros(top.shape, np.float32).tobytes()])
    return frame(request), frame(response)


@pytest.fixture
def logger():
    rows: list[dict] = []
    batcher = Batcher(lambda key, body: None, prefix="p", model="gpt", writer="w", max_rows=10_000)
    batcher.add = lambda new: rows.extend(new)  # what reaches the batcher
    sink = Sink(FieldPolicy({"input_ids": True, "top_k_ids": False}), batcher, "gpt")
    draws = iter([0.1, 0.9, 0.1])  # sampled, not sampled, sampled (sample_percent 50)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    ep_grpc.add_ExternalProcessorServicer_to_server(servicer(sink, 50.0, draw=lambda: next(draws)), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield ep_grpc.ExternalProcessorStub(channel), rows, sink
    channel.close()
    server.stop(grace=None)


def test_sampled_streams_are_logged_with_their_outputs_and_personal_inputs_dropped(logger):
    stub, rows, sink = logger
    ids, top = np.array([[5, 5, 7, 9]]), np.array([[42, 7, 3]])
    request, response = grpc_inference(ids, top)
    headers = {":path": "/inference.GRPCInferenceService/ModelInfer", "content-type": "application/grpc",
               "x-mlplat-tenant": "applied"}
    for _ in range(2):  # the first is sampled, the second is not
        assert list(stub.Process(envoy_stream(headers, request, response))) == []  # shadow mode: no answers
    body = json.dumps({"inputs": [{"name": "input_ids", "shape": [1, 3], "datatype": "INT64", "data": [1, 2, 3]}]})
    answer = json.dumps({"model_name": "gpt", "outputs": [
        {"name": "top_k_ids", "shape": [1, 2], "datatype": "INT64", "data": [9, 8]}]})
    rest = {":path": "/v2/models/gpt/infer", "content-type": "application/json", "x-mlplat-tenant": "serving"}
    list(stub.Process(envoy_stream(rest, body.encode(), answer.encode())))
    assert [(r["tenant"], r["version"], r["tokens"], r["top_k_ids"]) for r in rows] == [
        ("applied", "7", 4, [42, 7, 3]), ("serving", "", 3, [9, 8])]
    assert all("input_ids" not in r and "top_k_logprobs" not in r for r in rows)  # personal; unmarked
    assert sink.refused == 0


def test_a_stream_that_is_not_an_inference_is_counted_not_logged(logger):
    stub, rows, sink = logger
    list(stub.Process(envoy_stream({":path": "/v2/health/ready", "content-type": "application/json"}, b"", b"{}")))
    assert rows == [] and sink.refused == 1
