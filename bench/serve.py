"""Serving throughput and latency: one inference per request versus dynamic batching.

The platform's GPT is exported to ONNX (as `python -m workloads.serve export` does) and
served by ONNX Runtime on the CPU, the way the smb stack serves it. The same closed-loop
load (C concurrent clients, each sending its next request as soon as the last one is
answered, for a fixed time) is offered to two servers that differ only in scheduling:

  single   each model instance takes one request and runs it alone;
  batched  a dynamic batcher in front of the same instances, as Triton's: an instance that
           becomes free takes the queued requests, waits at most the max queue delay
           (counted from the oldest request's arrival) for more, and runs them as one batch
           of at most the largest preferred size.

Both use the same instances (sessions, threads per session). Latency is measured at the
client, from sending a request to holding its answer, so it includes queueing. Each mode
runs `--repeat` times, alternating with the other, and the median run is reported; the
requests per CPU-second of the process are printed too, as they move less than wall-clock
throughput when other work shares the machine.

The comparison is made for several request lengths, because on a CPU the answer depends on
it: batching pays for what a run costs regardless of its size (dispatching the graph's
nodes, the session call), so it multiplies throughput for short requests and gains little
once a request alone keeps the matrix units busy. For each length the benchmark also
prints the ceiling: the most any batcher (batches up to the largest preferred size) could
gain over the single-request server measured, from the model's own time per request inside
a full batch. Where the ceiling is under 3x, no scheduler can meet the target on the
machine at hand.

    .venv/bin/python bench/serve.py [--sequence 1 4 8 16 32] [--clients 32] [--seconds 4] [--repeat 3]
    .venv/bin/python bench/serve.py --smoke [--output FILE]   # 1 length, 4 clients, half a second

Target: batched throughput >= 3x single, at a p99 latency no worse than 2x single's.
Results are also written to bench/results/serve.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
RESULTS = REPO / "bench" / "results" / "serve.json"
# What the figures are, said with them: no Triton and no network runs here.
MEASURED = ("in-process emulation: ONNX Runtime sessions behind a Python model of Triton's dynamic batcher, clients "
            "as threads of the same process; no server, no gRPC")


@dataclass
class Request:
    client: int
    ids: np.ndarray  # [1, T] int64
    sent: float = field(default_factory=time.perf_counter)


class ClosedLoop:
    """C clients, each sending its next request the moment its last one is answered.

    Clients are callbacks rather than threads, so the load generator costs next to nothing
    and the numbers measure the server: with 32 Python threads as clients, their own
    wake-ups would dominate. Only requests sent inside the measured window count.
    """

    def __init__(self, inputs: list[np.ndarray], *, clients: int, seconds: float, warmup: float) -> None:
        self.inputs = inputs
        self.clients = clients
        self.seconds = seconds
        self.warmup = warmup
        self.latencies: list[float] = []
        self.answers = 0  # every answer, warm-up included (for the CPU cost per request)
        self.sent = [0] * clients
        self.outstanding = clients
        self.done = threading.Event()
        self.lock = threading.Lock()

    def run(self, server: Server) -> None:
        self.server = server
        start = time.perf_counter()
        self.measure_from, self.stop_at = start + self.warmup, start + self.warmup + self.seconds
        for n in range(self.clients):
            self._send(n)
        self.done.wait()

    def _send(self, client: int) -> None:
        i = client + self.sent[client] * self.clients
        self.sent[client] += 1
        self.server.submit(Request(client, self.inputs[i % len(self.inputs)]))

    def answered(self, request: Request, logits: np.ndarray) -> None:
        now = time.perf_counter()
        assert logits.shape[0] == 1
        with self.lock:
            self.answers += 1
            if request.sent >= self.measure_from and now <= self.stop_at:
                self.latencies.append(now - request.sent)
            if now < self.stop_at:
                self._send(request.client)
                return
            self.outstanding -= 1
            if not self.outstanding:
                self.done.set()

    def summary(self, batches: list[int]) -> dict:
        ms = np.array(self.latencies) * 1000.0
        return {
            "requests": int(ms.size),
            "throughput_rps": round(ms.size / self.seconds, 1),
            "p50_ms": round(float(np.percentile(ms, 50)), 2),
            "p99_ms": round(float(np.percentile(ms, 99)), 2),
            "mean_batch": round(float(np.mean(batches)), 1) if batches else 0.0,
        }


class Server:
    """`instances` worker threads, each owning one ONNX Runtime session, fed from one queue.

    With batch sizes (1,) every request runs alone. Otherwise a free instance forms its
    batch the way Triton's dynamic batcher does: the largest preferred size the queued
    requests fill is sent at once (the rest stay queued); while no preferred size can be
    filled, it waits for more until the oldest request has waited the max queue delay,
    then sends what is there (at most the largest preferred size).
    """

    def __init__(self, sessions: list, load: ClosedLoop, *, batch_sizes: tuple[int, ...] = (1,),
                 max_delay_s: float = 0.0) -> None:
        self.pending: deque[Request] = deque()
        self.ready = threading.Condition()
        self.closed = False
        self.load = load
        self.sizes = sorted(set(batch_sizes), reverse=True)
        self.max_delay_s = max_delay_s
        self.batches: list[int] = []
        self.workers = [threading.Thread(target=self._serve, args=(s,), daemon=True) for s in sessions]
        for worker in self.workers:
            worker.start()

    def submit(self, request: Request) -> None:
        with self.ready:
            self.pending.append(request)
            # Every waiting instance looks again: one may be filling a batch, another idle.
            self.ready.notify_all()

    def _take(self) -> list[Request] | None:
        with self.ready:
            while True:
                if not self.pending:  # nothing queued, or another instance took it meanwhile
                    if self.closed:
                        return None
                    self.ready.wait()
                    continue
                queued = len(self.pending)
                size = next((s for s in self.sizes if s <= queued), 0)
                if not size:
                    left = self.pending[0].sent + self.max_delay_s - time.perf_counter()
                    if left > 0:
                        self.ready.wait(left)
                        continue
                    size = min(queued, self.sizes[0])
                return [self.pending.popleft() for _ in range(size)]

    def _serve(self, session) -> None:
        while (batch := self._take()) is not None:
            ids = batch[0].ids if len(batch) == 1 else np.concatenate([r.ids for r in batch])
            (logits,) = session.run(["logits"], {"input_ids": ids})
            self.batches.append(len(batch))
            for i, request in enumerate(batch):
                self.load.answered(request, logits[i : i + 1])

    def close(self) -> None:
        with self.ready:
            self.closed = True
            self.ready.notify_all()
        for worker in self.workers:
            worker.join()


def export_model(args: argparse.Namespace, directory: Path) -> tuple[Path, int]:
    import torch

    from workloads.serve.export import export_onnx
    from workloads.train.model import GPT, GPTConfig

    torch.manual_seed(0)
    config = GPTConfig.tiny(n_layer=args.layers, n_embd=args.embd, n_head=args.heads, vocab_size=args.vocab,
                            block_size=args.block)
    model = GPT(config).eval()
    path = directory / "model.onnx"
    export_onnx(model, path, vocab_size=config.vocab_size, max_sequence=config.block_size)
    return path, model.num_params()


def smb_settings() -> dict:
    from infra.config import load_stack

    settings = load_stack("smb").inference
    return {"instances": settings.instance_count,
            "threads": max(1, settings.cpu_per_replica // settings.instance_count),
            "preferred": list(settings.preferred_batch_sizes),
            "max_delay_us": settings.max_queue_delay_microseconds}


def run_mode(mode: str, path: Path, inputs: list[np.ndarray], args: argparse.Namespace) -> dict:
    from workloads.serve.export import ort_session

    sessions = [ort_session(path, intra_op_threads=args.threads) for _ in range(args.instances)]
    load = ClosedLoop(inputs, clients=args.clients, seconds=args.seconds, warmup=args.warmup)
    if mode == "single":
        server = Server(sessions, load)
    else:
        server = Server(sessions, load, batch_sizes=tuple(args.preferred), max_delay_s=args.max_delay_us / 1e6)
    cpu_started = time.process_time()
    load.run(server)
    cpu_seconds = time.process_time() - cpu_started
    server.close()
    result = load.summary(server.batches)
    # Requests per second of this process's CPU time: what the server costs, whatever else
    # runs on the machine (wall-clock throughput moves with other people's load).
    result["requests_per_cpu_second"] = round(load.answers / cpu_seconds, 1) if cpu_seconds else 0.0
    return result


def batching_ceiling(path: Path, inputs: list[np.ndarray], args: argparse.Namespace, single_rps: float) -> float:
    """An upper bound on batched / single throughput for any batcher whose batches hold at
    most the largest preferred size: the single server's time per request (per instance)
    over the model's own time per request in a full batch, timed on one session with no
    server, no queue and no other instance running. A batcher can remove the server's cost
    and the cost of each run; it cannot make a request's arithmetic cheaper than its share
    of the largest batch it may form."""
    from workloads.serve.export import ort_session

    session = ort_session(path, intra_op_threads=args.threads)
    size = max(args.preferred)
    ids = np.concatenate([inputs[i % len(inputs)] for i in range(size)])
    for _ in range(20):
        session.run(["logits"], {"input_ids": ids})
    times = []
    deadline = time.perf_counter() + 1.0
    while time.perf_counter() < deadline or len(times) < 20:
        started = time.perf_counter()
        session.run(["logits"], {"input_ids": ids})
        times.append(time.perf_counter() - started)
    per_request_batched = float(np.median(times)) / size
    per_request_single = args.instances / single_rps
    return per_request_single / per_request_batched


def median_run(runs: list[dict]) -> dict:
    """The run with the median throughput, whole (its latencies belong to it)."""
    return sorted(runs, key=lambda r: r["throughput_rps"])[len(runs) // 2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=32, help="concurrent closed-loop clients")
    parser.add_argument("--seconds", type=float, default=4.0, help="measured time per run")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3, help="runs per mode, alternating; the median is reported")
    parser.add_argument("--sequence", type=int, nargs="+", default=[1, 4, 8, 16, 32],
                        help="tokens per request; one comparison per length")
    # Defaults: one replica of the smb stack's CPU service, with the batching settings it
    # ships (mlplat:inference), so the numbers are those of the configuration in use.
    shipped = smb_settings()
    parser.add_argument("--instances", type=int, default=shipped["instances"],
                        help="model instances (sessions) in both modes")
    parser.add_argument("--threads", type=int, default=shipped["threads"],
                        help="ONNX Runtime intra-op threads per instance")
    parser.add_argument("--preferred", type=int, nargs="+", default=shipped["preferred"],
                        help="preferred batch sizes")
    parser.add_argument("--max-delay-us", type=int, default=shipped["max_delay_us"], help="max queue delay")
    # The trainer's `tiny` preset: the model the serving tests export.
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--embd", type=int, default=64)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--no-write", action="store_true", help="do not update bench/results/serve.json")
    from bench import options
    from bench.machine import describe, finish, record

    args = options.parse(parser, {"sequence": [1], "clients": 4, "seconds": 0.5, "warmup": 0.1, "repeat": 1})

    machine = record()
    args.block = max(64, *args.sequence)

    from workloads.serve.spec import check_serving

    # The batcher's settings obey the same rules as a served model's.
    check_serving(model_name="bench", device="cpu", max_batch_size=max(args.preferred),
                  preferred_batch_sizes=tuple(args.preferred), max_queue_delay_microseconds=args.max_delay_us,
                  instance_count=args.instances, keep_versions=1)
    comparisons = []
    with tempfile.TemporaryDirectory() as tmp:
        path, params = export_model(args, Path(tmp))
        print(f"GPT {params / 1e6:.2f}M params ({args.layers} layers, d={args.embd}, vocab {args.vocab}), ONNX "
              f"Runtime CPU, {args.instances} instances x {args.threads} thread(s), {args.clients} closed-loop "
              f"clients, batcher {args.preferred} / {args.max_delay_us} us, median of {args.repeat} x "
              f"{args.seconds:g} s per mode, {os.cpu_count()} cores", flush=True)
        print(f"{'tokens':>6} {'mode':8} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'batch':>6} {'req/CPU-s':>10}")
        for sequence in args.sequence:
            rng = np.random.default_rng(sequence)
            inputs = [rng.integers(0, args.vocab, size=(1, sequence), dtype=np.int64) for _ in range(256)]
            runs: dict[str, list[dict]] = {"single": [], "batched": []}
            ceilings = []
            # Alternating, so a burst of someone else's load on the machine hits both modes;
            # the ceiling is timed in each round too, against that round's single server, and
            # the highest kept: a bound timed once, in a quiet second or a busy one, can sit
            # below the gain the runs around it measured.
            for _ in range(args.repeat):
                for mode in runs:
                    runs[mode].append(run_mode(mode, path, inputs, args))
                ceilings.append(batching_ceiling(path, inputs, args, runs["single"][-1]["throughput_rps"]))
            single, batched = median_run(runs["single"]), median_run(runs["batched"])
            speedup = batched["throughput_rps"] / single["throughput_rps"]
            p99_ratio = batched["p99_ms"] / single["p99_ms"]
            met = speedup >= 3.0 and p99_ratio <= 2.0
            ceiling = max(ceilings)
            for mode, r in (("single", single), ("batched", batched)):
                print(f"{sequence:6} {mode:8} {r['throughput_rps']:9.1f} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} "
                      f"{r['mean_batch']:6.1f} {r['requests_per_cpu_second']:10.1f}")
            per_cpu = batched["requests_per_cpu_second"] / single["requests_per_cpu_second"]
            verdict = "met" if met else "NOT met"
            if not met and ceiling < 3.0:
                verdict += f" (out of reach here: no batcher of <= {max(args.preferred)} can pass {ceiling:.2f}x)"
            print(f"{sequence:6} batching: {speedup:.2f}x throughput ({per_cpu:.2f}x per CPU-second), p99 "
                  f"{p99_ratio:.2f}x single's, ceiling {ceiling:.2f}x (target >= 3x at <= 2x): {verdict}",
                  flush=True)
            comparisons.append({"sequence": sequence, "single": single, "batched": batched,
                                "throughput_speedup": round(speedup, 2), "per_cpu_speedup": round(per_cpu, 2),
                                "p99_ratio": round(p99_ratio, 2), "ceiling": round(ceiling, 2),
                                "target_met": met, "runs": runs})
    held = [c["sequence"] for c in comparisons if c["target_met"]]
    unreachable = [c["sequence"] for c in comparisons if not c["target_met"] and c["ceiling"] < 3.0]
    print(f"target met for {held or 'no'} tokens per request; out of reach on this machine for "
          f"{unreachable or 'no'} (load average {os.getloadavg()[0]:.1f})")
    if not args.no_write:
        machine = finish(machine)
        options.write(options.output(args, RESULTS), {
            "machine": describe(machine), "cpu": machine,
            "date": date.today().isoformat(),
            "load_average": round(os.getloadavg()[0], 1),
            "measured": MEASURED,
            "model": {"params": params, "layers": args.layers, "embd": args.embd, "vocab": args.vocab},
            "load": {"clients": args.clients, "seconds": args.seconds, "repeat": args.repeat,
                     "instances": args.instances, "threads_per_instance": args.threads,
                     "preferred_batch_sizes": args.preferred, "max_queue_delay_us": args.max_delay_us},
            "comparisons": comparisons,
        })
    return 0


if __name__ == "__main__":
    sys.exit(main())
