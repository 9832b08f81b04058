"""Serving through a real server: the exported GPT behind MLServer (Apache-2.0, a KServe v2
gRPC server: the protocol Triton speaks), one request per run versus its adaptive batching,
with closed-loop clients over gRPC on the loopback interface.

What is measured: MLServer 1.7.1 in its own process (its own virtualenv, .venv-mlserver,
made by `make bench`), ONNX Runtime on the CPU inside it (a small runtime,
bench/mlserver_runtime.py, that answers with the next token's top k as the served model
does), `parallel_workers` worker processes of one ONNX Runtime thread each (the smb
stack's instances and threads), and the clients as tritonclient's gRPC client in this
process. Client and server share the machine's cores, so the figures are what one small
box does end to end, not what Triton does on a GPU (that is the GPU lane's).

Single: MLServer with max_batch_size 1. Batched: its adaptive batching with the smb
stack's largest preferred size and max queue delay. Each mode runs `--repeat` times,
alternating, and the median run is reported.

    .venv/bin/python bench/serve_server.py [--sequence 1 8 32] [--clients 32] [--seconds 5]
    .venv/bin/python bench/serve_server.py --smoke [--output FILE]   # 1 length, each server once, 4 clients

Results are written to bench/results/serve-server.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import date
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import options  # noqa: E402
from bench.machine import describe, finish, record  # noqa: E402
from bench.serve import export_model, median_run, smb_settings  # noqa: E402
from tests.services.oci import free_port  # noqa: E402

RESULTS = REPO / "bench" / "results" / "serve-server.json"
MLSERVER = REPO / ".venv-mlserver" / "bin" / "mlserver"
MEASURED = ("through a real server: MLServer 1.7.1 (KServe v2 gRPC) in its own process, ONNX Runtime CPU runtime, "
            "clients over loopback gRPC in another process on the same cores")


class Served:
    """One MLServer process serving the model with the given batching."""

    def __init__(self, model: Path, folder: Path, *, workers: int, threads: int, max_batch: int,
                 max_batch_time_s: float) -> None:
        self.grpc_port, http_port, metrics_port = free_port(), free_port(), free_port()
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "settings.json").write_text(json.dumps({
            "debug": False, "host": "127.0.0.1", "http_port": http_port, "grpc_port": self.grpc_port,
            "metrics_port": metrics_port, "parallel_workers": workers}))
        shutil.copy(REPO / "bench" / "mlserver_runtime.py", folder / "mlserver_runtime.py")
        (folder / "model-settings.json").write_text(json.dumps({
            "name": "gpt", "implementation": "mlserver_runtime.OnnxNextToken",
            "parameters": {"uri": str(model), "extra": {"threads": threads}},
            "max_batch_size": max_batch, "max_batch_time": max_batch_time_s}))
        self.log = (folder / "mlserver.log").open("w")
        self.process = subprocess.Popen([str(MLSERVER), "start", str(folder)], stdout=self.log,
                                        stderr=subprocess.STDOUT, cwd=folder, start_new_session=True)
        self.url = f"127.0.0.1:{self.grpc_port}"
        self._wait_ready(folder)

    def _wait_ready(self, folder: Path) -> None:
        import tritonclient.grpc as grpcclient

        deadline = time.monotonic() + 120
        client = grpcclient.InferenceServerClient(self.url)
        try:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"MLServer exited: {(folder / 'mlserver.log').read_text()[-2000:]}")
                try:
                    if client.is_server_ready() and client.is_model_ready("gpt"):
                        return
                except Exception:  # noqa: BLE001 - not listening yet
                    pass
                time.sleep(0.5)
        finally:
            client.close()
        raise RuntimeError("MLServer did not become ready in 120 s")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


def closed_loop(url: str, inputs: list[np.ndarray], *, clients: int, seconds: float, warmup: float) -> dict:
    """`clients` concurrent clients, each sending its next request when its last is answered;
    only requests sent inside the measured window count."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    wanted = [grpcclient.InferRequestedOutput("top_k_ids"), grpcclient.InferRequestedOutput("top_k_logprobs")]
    lock, done = threading.Lock(), threading.Event()
    latencies: list[float] = []
    failures: list[str] = []
    outstanding = [clients]
    counter = [0]
    start = time.perf_counter()
    measure_from, stop_at = start + warmup, start + warmup + seconds

    def send(slot: int) -> None:
        with lock:
            i = counter[0]
            counter[0] += 1
        ids = inputs[i % len(inputs)]
        request = grpcclient.InferInput("input_ids", list(ids.shape), "INT64")
        request.set_data_from_numpy(ids)
        sent = time.perf_counter()
        client.async_infer("gpt", [request], callback=lambda result, error: answered(slot, sent, error),
                           outputs=wanted)

    def answered(slot: int, sent: float, error) -> None:
        now = time.perf_counter()
        with lock:
            if error is not None:
                failures.append(str(error))
            elif sent >= measure_from and now <= stop_at:
                latencies.append(now - sent)
            if now < stop_at and not failures:
                again = True
            else:
                again = False
                outstanding[0] -= 1
                if not outstanding[0]:
                    done.set()
        if again:
            send(slot)

    for slot in range(clients):
        send(slot)
    done.wait(timeout=seconds + warmup + 120)
    client.close()
    if failures:
        raise RuntimeError(f"{len(failures)} requests failed: {failures[0]}")
    ms = np.array(latencies) * 1000.0
    return {"requests": int(ms.size), "throughput_rps": round(ms.size / seconds, 1),
            "p50_ms": round(float(np.percentile(ms, 50)), 2), "p99_ms": round(float(np.percentile(ms, 99)), 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sequence", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--no-write", action="store_true")
    args = options.parse(parser, {"sequence": [1], "clients": 4, "seconds": 0.5, "warmup": 0.1, "repeat": 1})
    if not MLSERVER.exists():
        print(f"{MLSERVER} is missing: run `make bench` (it makes .venv-mlserver), or "
              f"python3 -m venv .venv-mlserver && .venv-mlserver/bin/pip install mlserver==1.7.1 onnxruntime==1.31.1 uvloop==0.21.0",
              file=sys.stderr)
        return 2
    shipped = smb_settings()
    max_batch = max(shipped["preferred"])
    machine = record()
    model_args = argparse.Namespace(layers=2, embd=64, heads=2, vocab=256, block=max(64, *args.sequence))
    comparisons = []
    with tempfile.TemporaryDirectory(prefix="mlplat-bench-mlserver-") as tmp:
        model, params = export_model(model_args, Path(tmp))
        print(f"GPT {params / 1e6:.2f}M params behind MLServer: {shipped['instances']} workers x {shipped['threads']} "
              f"thread(s), batched mode up to {max_batch} in {shipped['max_delay_us']} us; {args.clients} clients, "
              f"median of {args.repeat} x {args.seconds:g} s; {MEASURED}", flush=True)
        for sequence in args.sequence:
            rng = np.random.default_rng(sequence)
            inputs = [rng.integers(0, 256, size=(1, sequence), dtype=np.int64) for _ in range(256)]
            runs: dict[str, list[dict]] = {"single": [], "batched": []}
            for attempt in range(args.repeat):
                for mode in runs:
                    batch, delay = (1, 0.0) if mode == "single" else (max_batch, shipped["max_delay_us"] / 1e6)
                    served = Served(model, Path(tmp) / f"{sequence}-{mode}-{attempt}", workers=shipped["instances"],
                                    threads=shipped["threads"], max_batch=batch, max_batch_time_s=delay)
                    try:
                        runs[mode].append(closed_loop(served.url, inputs, clients=args.clients,
                                                      seconds=args.seconds, warmup=args.warmup))
                    finally:
                        served.stop()
            single, batched = median_run(runs["single"]), median_run(runs["batched"])
            speedup = batched["throughput_rps"] / single["throughput_rps"]
            p99_ratio = batched["p99_ms"] / single["p99_ms"]
            print(f"{sequence:3} tokens: single {single['throughput_rps']:.0f} req/s (p99 {single['p99_ms']:.1f} ms), "
                  f"batched {batched['throughput_rps']:.0f} req/s (p99 {batched['p99_ms']:.1f} ms): {speedup:.2f}x, "
                  f"p99 {p99_ratio:.2f}x", flush=True)
            comparisons.append({"sequence": sequence, "single": single, "batched": batched,
                                "throughput_speedup": round(speedup, 2), "p99_ratio": round(p99_ratio, 2),
                                "runs": runs})
    machine = finish(machine)
    if not args.no_write:
        options.write(options.output(args, RESULTS), {
            "machine": describe(machine), "cpu": machine, "date": date.today().isoformat(),
            "load_average": round(os.getloadavg()[0], 1), "measured": MEASURED,
            "server": {"name": "MLServer", "version": "1.7.1", "workers": shipped["instances"],
                       "threads_per_worker": shipped["threads"], "max_batch_size": max_batch,
                       "max_batch_time_us": shipped["max_delay_us"]},
            "load": {"clients": args.clients, "seconds": args.seconds, "repeat": args.repeat},
            "comparisons": comparisons})
    print(f"machine: {describe(machine)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
