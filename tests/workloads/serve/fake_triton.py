"""A small in-process server speaking Triton's gRPC inference protocol, backed by ONNX
Runtime, so the smoke client is tested over a real gRPC connection.

`truncate_top_k` and `delay_s` let a test make the server misbehave the ways a broken
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
from workloads.serve.spec import DEFAULT_TOP_K, INPUT_NAME, OUTPUT_NAME, TOP_K_IDS, TOP_K_LOGPROBS, ModelSpec
from workloads.serve.triton_config import build_model_config


class FakeTriton(service_pb2_grpc.GRPCInferenceServiceServicer):
    def __init__(self, model: str, onnx_path: Path, vocab_size: int, *, ready: bool = True,
                 delay_s: float = 0.0, truncate_top_k: bool = False, max_sequence: int = -1) -> None:
        self.model = model
        self.session = ort_session(onnx_path, intra_op_threads=1)
        self.vocab_size = vocab_size
        self.ready = ready
        self.delay_s = delay_s
        self.truncate_top_k = truncate_top_k
        self.requests = 0
        self.asked: list[str] = []  # the outputs the last request named
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
            outputs=[tensor(name=OUTPUT_NAME, datatype="FP32", shape=[-1, self.vocab_size]),
                     tensor(name=TOP_K_IDS, datatype="INT64", shape=[-1, DEFAULT_TOP_K]),
                     tensor(name=TOP_K_LOGPROBS, datatype="FP32", shape=[-1, DEFAULT_TOP_K])],
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
        # Only the outputs the request names, as Triton answers.
        self.asked = [output.name for output in request.outputs]
        names = self.asked or [OUTPUT_NAME, TOP_K_IDS, TOP_K_LOGPROBS]
        answers = self.session.run(names, {INPUT_NAME: ids})
        if self.truncate_top_k:
            answers = [np.ascontiguousarray(a[..., :-1]) if n != OUTPUT_NAME else a for n, a in zip(names, answers)]
        if self.delay_s:
            time.sleep(self.delay_s)
        kinds = {np.dtype(np.float32): "FP32", np.dtype(np.int64): "INT64"}
        outputs = [service_pb2.ModelInferResponse.InferOutputTensor(name=name, datatype=kinds[answer.dtype],
                                                                     shape=list(answer.shape))
                   for name, answer in zip(names, answers, strict=True)]
        return service_pb2.ModelInferResponse(model_name=self.model, model_version="1", outputs=outputs,
                                              raw_output_contents=[answer.tobytes() for answer in answers])


def serve(servicer: FakeTriton) -> tuple[grpc.Server, str]:
    """Start `servicer` on a free local port; returns the server and its host:port."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"
