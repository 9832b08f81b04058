"""The request logger: where the inference gateway mirrors a sample of the requests it let
through (Gateway API `RequestMirror`, `requestLogging.samplePercent`).

It speaks the two ways requests arrive, KServe v2 over gRPC (`ModelInfer`) and over REST
(`POST /v2/models/<model>/infer`), answers at once with nothing (the gateway discards a
mirror's answer), and hands each request to the Batcher as rows the field policy allows.
The caller's tenant comes from the header the gateway sets from the token's claim; no
header's value is logged otherwise. REST bodies must be JSON (KServe v2's binary tensor
extension is counted as refused, not logged); gRPC carries every client's tensors.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from workloads.monitor.request_log import Batcher, FieldPolicy, RequestLogError, rows_of

TENANT_HEADER = "x-mlplat-tenant"
_NUMPY = {"INT64": np.int64, "INT32": np.int32, "FP32": np.float32, "FP64": np.float64, "BOOL": np.bool_}


class Sink:
    """The field policy and the batcher, shared by both front ends."""

    def __init__(self, policy: FieldPolicy, batcher: Batcher, model: str) -> None:
        self.policy, self.batcher, self.model = policy, batcher, model
        self.lock = threading.Lock()
        self.refused = 0  # requests that did not fit the policy (counted, not logged)
        self.closed = False  # the last write has begun: rows taken from here on are lost
        self.late = 0  # rows taken after that, counted for the logger's last line

    def refuse(self) -> None:
        """A request that did not fit: counted, not logged."""
        with self.lock:
            self.refused += 1

    def take(self, inputs: dict[str, np.ndarray], *, model: str, version: str, tenant: str,
             outputs: dict[str, np.ndarray] | None = None) -> None:
        if model != self.model:
            self.refuse()
            return
        try:
            rows = rows_of(inputs, self.policy, model=model, version=version, tenant=tenant, outputs=outputs)
        except RequestLogError:
            self.refuse()
            return
        with self.lock:
            if self.closed:  # a request that was still in flight when the servers stopped
                self.late += len(rows)
                return
            try:
                self.batcher.add(rows)  # may write, when the batch is full
            except Exception as err:  # noqa: BLE001 - the rows stay held; the next flush retries
                print(f"request logs not written yet (kept for the next try): {type(err).__name__}",
                      file=sys.stderr, flush=True)

    def flush(self, *, last: bool = False) -> None:
        """Write what is held; the last write also closes the sink to rows that come later."""
        with self.lock:
            self.closed = self.closed or last
            self.batcher.flush()

    def lost(self) -> int:
        """Rows that will not be written if the process ends now."""
        return self.batcher.held + self.late


def rest_route(path: str) -> tuple[str, str] | None:
    """(model, version) of a KServe v2 REST inference path, `/v2/models/<model>/infer` or
    `/v2/models/<model>/versions/<version>/infer` (version "" for the first); None for
    any other path."""
    parts = path.strip("/").split("/")
    if len(parts) not in (4, 6) or parts[:2] != ["v2", "models"] or parts[-1] != "infer":
        return None
    return parts[2], parts[4] if len(parts) == 6 else ""


def json_tensors(tensors: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """The tensors of a KServe v2 REST body's `inputs` or `outputs` (JSON data)."""
    return {t["name"]: np.asarray(t["data"], dtype=_NUMPY[t["datatype"]]).reshape(t["shape"]) for t in tensors}


def _grpc_inputs(request: Any) -> dict[str, np.ndarray]:
    """A ModelInferRequest's tensors, from raw contents (what clients send) or typed ones."""
    found = {}
    for index, tensor in enumerate(request.inputs):
        dtype = _NUMPY.get(tensor.datatype)
        if dtype is None:
            raise RequestLogError(f"input {tensor.name!r} has type {tensor.datatype}")
        if index < len(request.raw_input_contents):
            values = np.frombuffer(request.raw_input_contents[index], dtype=dtype)
        else:
            contents = tensor.contents
            values = np.array(list(contents.int64_contents or contents.int_contents or contents.fp32_contents
                                   or contents.fp64_contents or contents.bool_contents), dtype=dtype)
        found[tensor.name] = values.reshape(list(tensor.shape))
    return found


def grpc_server(sink: Sink, port: int, *, workers: int = 4) -> Any:
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    class Mirror(service_pb2_grpc.GRPCInferenceServiceServicer):
        def ServerLive(self, request, context):  # noqa: N802 (gRPC method names)
            return service_pb2.ServerLiveResponse(live=True)

        def ServerReady(self, request, context):  # noqa: N802
            return service_pb2.ServerReadyResponse(ready=True)

        def ModelInfer(self, request, context):  # noqa: N802
            tenant = dict(context.invocation_metadata()).get(TENANT_HEADER, "")
            try:
                inputs = _grpc_inputs(request)
            except (RequestLogError, ValueError):
                sink.refuse()
            else:
                sink.take(inputs, model=request.model_name, version=request.model_version, tenant=tenant)
            return service_pb2.ModelInferResponse(model_name=request.model_name, id=request.id)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers))
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(Mirror(), server)
    bound = server.add_insecure_port(f"0.0.0.0:{port}")
    server.start()
    server.bound_port = bound
    return server


# A REST request's body at most: the bound gRPC's front end has by default (its receive limit).
MAX_BODY = 4 << 20
# Seconds a REST caller may leave the logger waiting for the rest of its request.
READ_TIMEOUT_S = 30.0
# Seconds the logger reads and drops what a refused caller still sends (a lingering close, as
# nginx's lingering_timeout): many clients send the whole body before they read the answer,
# and a connection closed with their bytes unread resets under them, the answer lost.
LINGER_S = 5.0


def http_server(sink: Sink, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        timeout = READ_TIMEOUT_S  # a caller that announces a body and never sends it frees its thread

        def log_message(self, *args: Any) -> None:  # no access log: it would name paths and callers
            pass

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _linger(self) -> None:
            """After an answer to a request whose body was left unread: the answer's end sent,
            then what the caller still sends read and dropped until it stops, for LINGER_S at
            most (then the close may reset it)."""
            deadline = time.monotonic() + LINGER_S
            try:
                self.connection.shutdown(socket.SHUT_WR)
                while (left := deadline - time.monotonic()) > 0:
                    self.connection.settimeout(left)
                    if not self.connection.recv(1 << 16):
                        return  # the caller is done
            except OSError:  # a timeout, or the caller gone
                return

        def do_GET(self) -> None:  # noqa: N802
            if self.path in ("/healthz", "/v2/health/ready", "/v2/health/live"):
                self._answer(200, {"ready": True})
            else:
                self._answer(404, {"error": "not found"})

        def do_POST(self) -> None:  # noqa: N802
            route = rest_route(self.path)
            if route is None:
                self._answer(404, {"error": "not found"})
                return
            model, version = route
            length = self.headers.get("content-length", "0").strip()
            digits = length.isascii() and length.isdigit()
            significant = length.lstrip("0") or "0"  # int() refuses thousands of digits; 13 are past any bound
            count = int(significant) if digits and len(significant) <= 12 else None
            if count is None or count > MAX_BODY:
                # Refused unread: a length that is no byte count, or a body past the bound. The
                # connection closes after the answer, as every one here does (HTTP/1.0), once
                # the caller has sent what it meant to (_linger).
                sink.refuse()
                if digits:
                    self._answer(413, {"error": f"a body of {MAX_BODY} bytes at most"})
                else:
                    self._answer(400, {"error": "content-length is not a byte count"})
                self._linger()
                return
            try:
                data = self.rfile.read(count)
            except TimeoutError:  # the rest of the body never came: not a request to answer
                sink.refuse()
                return
            try:
                body = json.loads(data)
                inputs = json_tensors(body["inputs"])
            except (ValueError, KeyError, TypeError):
                sink.refuse()
                self._answer(400, {"error": "not a KServe v2 inference request"})
                return
            sink.take(inputs, model=model, version=version, tenant=self.headers.get(TENANT_HEADER, ""))
            self._answer(200, {"model_name": model, "outputs": []})

    server = _Server(("0.0.0.0", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A caller that left before its answer (a mirror's sender does not wait for one): the rows
        # are taken already, and the standard library's traceback would say nothing of use.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)
