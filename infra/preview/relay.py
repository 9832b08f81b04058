"""Sends the preview's Analyze requests to the policy pack from a process of its own.

gRPC's Python client spends a fraction of a millisecond of the caller's CPU on each call.
The preview runs the program, the charts and the checks in one GIL-bound process, where
that time adds straight to the preview: 0.3 s of a 3.4 s prod preview (bench/preview.py).
Here the calls run beside the program, on the core the policy pack leaves idle, as the
engine's own process makes them in a real `pulumi preview`.

The relay only moves bytes: it never decodes a request or an answer. An AnalyzerResource
shares AnalyzeRequest's fields 1 to 6, so a stack request's resource is the resource's
Analyze request followed by the fields the stack adds (parent, dependencies): protobuf
merges concatenated messages.

Frames, each a tag byte, a 4-byte big-endian length and the payload:
  to the relay   P port (connect; sent once the pack is configured)
                 A urn, a newline, an AnalyzeRequest;  X what the stack request adds to it
                 F the stack request's URNs, newline-separated: finish
  from it        W ready: gRPC is loaded, first of all (its start-up is about 0.2 s)
                 R an AnalyzeResponse, one per A in the same order, each as soon as it is in
                 S the AnalyzeStack answer (the stack request goes out at F)
                 E one line: what failed (the last frame)
"""

from __future__ import annotations

import queue
import struct
import sys
import threading
from collections.abc import Callable, Iterable
from typing import BinaryIO

ANALYZE = "/pulumirpc.Analyzer/Analyze"
ANALYZE_STACK = "/pulumirpc.Analyzer/AnalyzeStack"
# Requests sent ahead of the pack's answers: thousands at once make the channel cancel
# some of them (seen at 5,000 resources), and the pack answers one at a time anyway.
MAX_IN_FLIGHT = 64
_HEADER = struct.Struct(">cI")
# Every channel to the pack: a stack request carries every resource, CRD schemas included.
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 256 << 20), ("grpc.max_send_message_length", 256 << 20)]


def write_frame(stream: BinaryIO, tag: bytes, payload: bytes) -> None:
    stream.write(_HEADER.pack(tag, len(payload)))
    stream.write(payload)


def read_frame(stream: BinaryIO) -> tuple[bytes, bytes] | None:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    tag, size = _HEADER.unpack(header)
    payload = stream.read(size)
    if len(payload) < size:
        return None
    return tag, payload


Frame = tuple[bytes, bytes]


class FrameWriter:
    """Writes frames to a helper process's stdin from a thread of its own: a thread that
    queues a frame never waits on the process. When the helper reads slower than the
    program registers, the pipe fills and only this thread waits (the program's threads
    waiting there stalled a prod preview by half a second).

    `prelude` runs first on the writer thread and gives the frames to write before the
    queued ones (the policy pack's port, once the pack is configured); what it raises,
    and a pipe the helper closed, are kept in `error` and the rest is dropped. `close()`
    ends the stream once the queue is written."""

    def __init__(self, stream: BinaryIO, prelude: Callable[[], Iterable[Frame]] = tuple) -> None:
        self.error: BaseException | None = None
        self.started = threading.Event()  # set once the prelude succeeded or failed
        self._stream = stream
        self._prelude = prelude
        self._frames: queue.SimpleQueue[Frame | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def put(self, tag: bytes, payload: bytes) -> None:
        self._frames.put((tag, payload))

    def close(self) -> None:
        """No more frames: the stream is closed once those queued are written."""
        self._frames.put(None)

    def join(self) -> None:
        self._thread.join()

    def _run(self) -> None:
        try:
            for frame in self._prelude():
                write_frame(self._stream, *frame)
        except BaseException as err:  # the caller re-raises it on its own thread
            self.error = err
        self.started.set()
        done = False
        while not done:
            # All the frames queued so far, in one write: each write that blocks on a full
            # pipe wakes this thread, which then takes the GIL from the program's.
            batch = bytearray()
            frame = self._frames.get()
            while frame is not None:
                batch += _HEADER.pack(frame[0], len(frame[1])) + frame[1]
                try:
                    frame = self._frames.get_nowait()
                except queue.Empty:
                    break
            done = frame is None
            if self.error is None and batch:
                try:
                    self._stream.write(batch)
                    self._stream.flush()
                except OSError as err:  # the helper is gone; what it said is read elsewhere
                    self.error = err
        try:
            self._stream.close()
        except OSError:
            pass  # frames still buffered for a helper that is gone


def last_line(text: str) -> str:
    """The last non-blank line of a process's error output: what failed."""
    return ([ln for ln in text.strip().splitlines() if ln.strip()][-1:] or ["no output"])[0]


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field: key, varint length, bytes."""
    key, size, out = (number << 3) | 2, len(payload), bytearray()
    out.append(key)
    while size >= 0x80:
        out.append((size & 0x7F) | 0x80)
        size >>= 7
    out.append(size)
    return bytes(out) + payload


def serve(source: BinaryIO, sink: BinaryIO) -> None:
    import grpc

    write_frame(sink, b"W", b"")
    sink.flush()

    analyze = analyze_stack = None
    answers: queue.SimpleQueue = queue.SimpleQueue()  # the Analyze calls, in the order sent; None ends
    resources: dict[str, bytes] = {}
    last_urn = ""
    in_flight = threading.BoundedSemaphore(MAX_IN_FLIGHT)
    writing = threading.Lock()  # one frame at a time: answers, and the last frame

    def said(err: BaseException) -> bytes:
        if isinstance(err, grpc.RpcError):
            return f"the policy pack failed: {err.code().name}: {err.details()}".encode()
        return f"the policy relay failed: {type(err).__name__}: {err}".encode()

    failed: list[bytes] = []

    def forward() -> None:
        """Each answer to the preview as soon as it and those sent before it are in, so the
        preview reads them while the pack works on the rest."""
        while (call := answers.get()) is not None:
            try:
                answer = call.result()
            except Exception as err:  # the first failure is the relay's last word
                failed.append(said(err))
                return
            with writing:
                write_frame(sink, b"R", answer)
                if answers.empty():
                    sink.flush()

    forwarder = threading.Thread(target=forward, daemon=True)
    forwarder.start()
    try:
        while (frame := read_frame(source)) is not None:
            tag, payload = frame
            if tag == b"P":
                channel = grpc.insecure_channel(f"127.0.0.1:{payload.decode()}", options=CHANNEL_OPTIONS)
                # No serializers: requests and answers pass through as bytes.
                analyze = channel.unary_unary(ANALYZE)
                analyze_stack = channel.unary_unary(ANALYZE_STACK)
            elif tag == b"A":
                last_urn, _, request = payload.partition(b"\n")
                in_flight.acquire()
                call = analyze.future(request)
                call.add_done_callback(lambda _done: in_flight.release())
                answers.put(call)
                resources[last_urn.decode()] = request
            elif tag == b"X":
                resources[last_urn.decode()] += payload
            elif tag == b"F":
                order = payload.decode().split("\n") if payload else []
                stack = b"".join(_field(1, resources[urn]) for urn in order)
                # Sent at once: it travels, and waits its turn at the pack, while the last
                # Analyze calls are answered.
                stack_call = analyze_stack.future(stack)
                answers.put(None)
                forwarder.join()
                last = (b"E", failed[0]) if failed else (b"S", stack_call.result())
                with writing:
                    write_frame(sink, *last)
                    sink.flush()
                return
    except Exception as err:  # anything else ends the relay with one line the preview reports
        with writing:
            write_frame(sink, b"E", failed[0] if failed else said(err))
    with writing:
        sink.flush()


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
