"""The request logger as Envoy's external processor, for stacks that also log outputs.

A mirror carries the request only. To keep what the model answered too, the gateway sends
each request and its response to the logger through Envoy's ext_proc filter in shadow
(observability) mode: "send and go", never waiting for the logger, so a slow or absent
logger costs the request nothing. Bodies arrive streamed, chunk by chunk; the logger
reassembles a sampled stream's request and response when Envoy closes it, decodes them
(KServe v2 over gRPC: length-prefixed protobuf frames; over REST: JSON) and hands the
inputs and the outputs to the same field policy as mirrored requests.
"""

from __future__ import annotations

import json
import random
import struct
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from workloads.monitor.logger import _NUMPY, TENANT_HEADER, Sink, json_tensors, rest_route

EXT_PROC_PORT = 9002


def grpc_message(body: bytes) -> bytes | None:
    """The first message of a gRPC body (1-byte compressed flag, 4-byte length, message);
    None for a compressed or incomplete one."""
    if len(body) < 5:
        return None
    compressed, length = struct.unpack(">BI", body[:5])
    if compressed or len(body) < 5 + length:
        return None
    return body[5:5 + length]


def _tensors(named: Any, raw: Any) -> dict[str, np.ndarray]:
    found = {}
    for index, tensor in enumerate(named):
        dtype = _NUMPY.get(tensor.datatype)
        if dtype is None or index >= len(raw):
            continue
        found[tensor.name] = np.frombuffer(raw[index], dtype=dtype).reshape(list(tensor.shape))
    return found


def decode_grpc(request_body: bytes, response_body: bytes) -> tuple[str, str, dict[str, np.ndarray],
                                                                     dict[str, np.ndarray]] | None:
    """(model, version, inputs, outputs) of a KServe v2 gRPC inference, or None."""
    from tritonclient.grpc import service_pb2

    asked, answered = grpc_message(request_body), grpc_message(response_body)
    if asked is None or answered is None:
        return None
    request, response = service_pb2.ModelInferRequest(), service_pb2.ModelInferResponse()
    request.ParseFromString(asked)
    response.ParseFromString(answered)
    return (request.model_name, request.model_version, _tensors(request.inputs, request.raw_input_contents),
            _tensors(response.outputs, response.raw_output_contents))


def decode_rest(path: str, request_body: bytes, response_body: bytes) -> tuple[str, str, dict[str, np.ndarray],
                                                                               dict[str, np.ndarray]] | None:
    route = rest_route(path.split("?", 1)[0])  # Envoy reports the path with its query
    if route is None:
        return None
    try:
        return (*route, json_tensors(json.loads(request_body)["inputs"]),
                json_tensors(json.loads(response_body)["outputs"]))
    except (ValueError, KeyError, TypeError):
        return None


class Stream:
    """One HTTP stream as Envoy reports it."""

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}
        self.request = bytearray()
        self.response = bytearray()

    def take(self, message: Any) -> None:
        kind = message.WhichOneof("request")
        if kind == "request_headers":
            self.headers = {h.key.lower(): h.raw_value.decode("latin-1") if h.raw_value else h.value
                            for h in message.request_headers.headers.headers}
        elif kind == "request_body":
            self.request += message.request_body.body
        elif kind == "response_body":
            self.response += message.response_body.body


def handle(stream: Stream, sink: Sink) -> None:
    """Decode what the stream carried and log it, or count it refused."""
    content_type = stream.headers.get("content-type", "")
    if content_type.startswith("application/grpc"):
        decoded = decode_grpc(bytes(stream.request), bytes(stream.response))
    else:
        decoded = decode_rest(stream.headers.get(":path", ""), bytes(stream.request), bytes(stream.response))
    if decoded is None:
        sink.refuse()
        return
    model, version, inputs, outputs = decoded
    sink.take(inputs, model=model, version=version, tenant=stream.headers.get(TENANT_HEADER, ""), outputs=outputs)


def servicer(sink: Sink, sample_percent: float, draw: Callable[[], float] = random.random) -> Any:
    from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc

    class Processor(ext_proc.ExternalProcessorServicer):
        def Process(self, request_iterator: Iterator[Any], context: Any) -> Iterator[Any]:  # noqa: N802
            sampled = draw() * 100 < sample_percent
            stream = Stream()
            for message in request_iterator:  # shadow mode: Envoy expects no answer
                if sampled:
                    stream.take(message)
            if sampled:
                handle(stream, sink)
            return iter(())

    return Processor()


def add_to(server: Any, sink: Sink, sample_percent: float) -> None:
    from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc

    ext_proc.add_ExternalProcessorServicer_to_server(servicer(sink, sample_percent), server)
