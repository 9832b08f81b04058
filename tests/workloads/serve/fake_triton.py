"""A small in-process server speaking Triton's gRPC inference protocol, backed by ONNX
Runtime, so the smoke client is tested over a real gRPC connection.

`answer_shape` and `delay_s` let a test make the server misbehave the ways a broken
deployment would: a wrong answer shape, or slow answers.
"""

from __future__ import annotations

import time
from concurrent import futures
from pathlib import Path

import grpc
import numpy as np
from tritonclient.grpc import service_pb2, service_pb2_grpc

from workloads.serve.export import ort_session
from workloads.serve.spec import INPUT_NAME, OUTPUT_NAME, ModelSpec
from workloads.serve.triton_config import build_model_config


class FakeTriton(service_pb2_grpc.GRPCInferenceServiceServicer):
    def __init__(self, model: str, onnx_path: Path, vocab_size: int, *, ready: bool = True,
                 delay_s: float = 0.0, truncate_vocab: bool = False, max_sequence: int = -1) -> None:
        self.model = model
        self.session = ort_session(onnx_path, intra_op_threads=1)
        self.vocab_size = vocab_size
        self.ready = ready
        self.delay_s = delay_s
        self.truncate_vocab = truncate_vocab
        self.requests = 0
        # The config Triton would serve: the one `export` writes, context length included.
        self.config = build_model_config(ModelSpec(name=model, vocab_size=vocab_size, max_sequence=max_sequence))

    def ServerReady(self, request, context):  # noqa: N802 (gRPC method names)
        return service_pb2.ServerReadyResponse(ready=self.ready)

    def ModelReady(self, request, context):  # noqa: N802
        return service_pb2.ModelReadyResponse(ready=self.ready and request.name == self.model)

    def ModelMetadata(self, request, context):  # noqa: N802
        if request.name != self.model:
            context.abort(grpc.StatusCode.NOT_FOUND, f"Request for unknown model: '{request.name}' is not found")
        tensor = service_pb2.ModelMetadataResponse.TensorMetadata
        return service_pb2.ModelMetadataResponse(
            name=self.model, versions=["1"], platform="onnxruntime_onnx",
            inputs=[tensor(name=INPUT_NAME, datatype="INT64", shape=[-1, -1])],
            outputs=[tensor(name=OUTPUT_NAME, datatype="FP32", shape=[-1, -1, self.vocab_size])],
        )

    def ModelConfig(self, request, context):  # noqa: N802
        if request.name != self.model:
            context.abort(grpc.StatusCode.NOT_FOUND, f"Request for unknown model: '{request.name}' is not found")
        return service_pb2.ModelConfigResponse(config=self.config)

    def ModelInfer(self, request, context):  # noqa: N802
        self.requests += 1
        if request.model_name != self.model:
            context.abort(grpc.StatusCode.NOT_FOUND, f"Request for unknown model: '{request.model_name}'")
        shape = list(request.inputs[0].shape)
        ids = np.frombuffer(request.raw_input_contents[0], dtype=np.int64).reshape(shape)
        (logits,) = self.session.run([OUTPUT_NAME], {INPUT_NAME: ids})
        if self.truncate_vocab:
            logits = np.ascontiguousarray(logits[..., :-1])
        if self.delay_s:
            time.sleep(self.delay_s)
        out = service_pb2.ModelInferResponse.InferOutputTensor(
            name=OUTPUT_NAME, datatype="FP32", shape=list(logits.shape))
        return service_pb2.ModelInferResponse(model_name=self.model, model_version="1", outputs=[out],
                                              raw_output_contents=[logits.astype(np.float32).tobytes()])


def serve(servicer: FakeTriton) -> tuple[grpc.Server, str]:
    """Start `servicer` on a free local port; returns the server and its host:port."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"
