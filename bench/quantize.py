"""int8 against fp32 for the CPU profile: what ONNX Runtime's dynamic quantization of the
served graph (`python -m workloads.serve export --precision int8`) costs in accuracy and
gains in speed, on this machine's CPU.

Accuracy needs a model whose answers mean something, so a small GPT (4 layers, 256 wide,
byte vocabulary) is first trained for a few hundred steps on the project's own source
files; both graphs are then exported exactly as `export` does and asked for the next byte
of held-out windows. Reported: the next-token cross-entropy of each (bits per byte), how
often their most likely next token agrees, the overlap of their top 16, and the mean KL
divergence between their next-token distributions.

Speed needs the served shape, so GPT-2 small (124M parameters, vocabulary 50304) is
exported in both precisions (its weights random: the arithmetic does not depend on them)
and timed in ONNX Runtime on the CPU, one session with the machine's cores, for single
requests and a batch of 8 at two lengths: the median of several runs after a warmup.

What is measured: ONNX Runtime in this process on this machine's CPU; no server.

    .venv/bin/python bench/quantize.py [--train-steps 300] [--runs 5] [--windows 2048]
    .venv/bin/python bench/quantize.py --smoke [--output FILE]   # a few steps, the small model timed

Results are written to bench/results/quantize.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import options  # noqa: E402
from bench.machine import describe, finish, record  # noqa: E402
from workloads.serve.export import agreement, export_checked, export_onnx, ort_session, quantize_int8  # noqa: E402
from workloads.serve.spec import INPUT_NAME, OUTPUT_NAME  # noqa: E402
from workloads.train.model import GPT, GPTConfig  # noqa: E402

RESULTS = REPO / "bench" / "results" / "quantize.json"
MEASURED = "ONNX Runtime CPU sessions in process, on this machine; no server"
SMALL = GPTConfig(vocab_size=256, block_size=128, n_layer=4, n_head=4, n_embd=256)
SMOKE_STEPS = 2


def corpus() -> np.ndarray:
    """The project's Python sources as bytes: text with real structure to learn."""
    text = b"\n".join(p.read_bytes() for p in sorted(REPO.glob("[a-z]*/**/*.py")) if ".venv" not in p.parts)
    return np.frombuffer(text, dtype=np.uint8).astype(np.int64)


def train_small(tokens: np.ndarray, steps: int, seed: int = 0, sequences: int = 32) -> GPT:
    torch.manual_seed(seed)
    model = GPT(SMALL)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(seed)
    length = SMALL.block_size
    for _ in range(steps):
        starts = rng.integers(0, len(tokens) - length - 1, sequences)
        batch = torch.from_numpy(np.stack([tokens[s:s + length + 1] for s in starts]))
        logits = model(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, SMALL.vocab_size), batch[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return model.eval()


def bits_per_byte(path: Path, windows: np.ndarray, targets: np.ndarray) -> float:
    session = ort_session(path)
    total = 0.0
    for start in range(0, len(windows), 64):
        (logits,) = session.run([OUTPUT_NAME], {INPUT_NAME: windows[start:start + 64]})
        logprobs = torch.log_softmax(torch.from_numpy(logits), dim=-1).numpy()
        total -= float(np.sum(logprobs[np.arange(len(logits)), targets[start:start + 64]]))
    return total / len(windows) / np.log(2)


def accuracy(steps: int, folder: Path, count: int = 2048, sequences: int = 32) -> dict:
    """The trained small model's two graphs on `count` held-out windows (and as many
    random requests)."""
    tokens = corpus()
    split = int(len(tokens) * 0.9)
    started = time.perf_counter()
    model = train_small(tokens[:split], steps, sequences=sequences)
    trained_s = time.perf_counter() - started
    paths = {}
    for precision in ("fp32", "int8"):
        result = export_checked(model, folder / f"small-{precision}" / "model.onnx", vocab_size=SMALL.vocab_size,
                                max_sequence=SMALL.block_size, precision=precision)
        paths[precision] = result.path
    held_out = tokens[split:]
    rng = np.random.default_rng(7)
    starts = rng.integers(0, len(held_out) - 65, count)
    windows = np.stack([held_out[s:s + 64] for s in starts])
    targets = held_out[starts + 64]
    measured = agreement(paths["fp32"], paths["int8"], vocab_size=SMALL.vocab_size, max_sequence=SMALL.block_size,
                         requests=count, tokens=64)
    # `agreement` draws random ids; the held-out text is what a served model sees.
    ref, got = (ort_session(paths[p]).run([OUTPUT_NAME], {INPUT_NAME: windows[:512]})[0] for p in ("fp32", "int8"))
    return {
        "model": {"params": sum(p.numel() for p in model.parameters()), **SMALL.to_dict()},
        "train": {"steps": steps, "sequences_per_step": sequences, "seconds": round(trained_s, 1),
                  "corpus_bytes": int(len(tokens))},
        "held_out_windows": len(windows),
        "bits_per_byte": {p: round(bits_per_byte(paths[p], windows, targets), 4) for p in paths},
        "held_out_top1_agreement": round(float(np.mean(ref.argmax(-1) == got.argmax(-1))), 4),
        "random_ids": {k: round(v, 6) for k, v in measured.to_dict().items()},
        "file_bytes": {p: paths[p].stat().st_size for p in paths},
    }


def timed(session, ids: np.ndarray, runs: int) -> float:
    session.run([OUTPUT_NAME], {INPUT_NAME: ids})  # warmup: arena and kernels
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        session.run([OUTPUT_NAME], {INPUT_NAME: ids})
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000.0


def speed(runs: int, folder: Path, model_name: str = "gpt2-124m") -> dict:
    config = GPTConfig.gpt2_124m() if model_name == "gpt2-124m" else SMALL
    torch.manual_seed(0)
    model = GPT(config).eval()
    # Exported and quantized as `export` does, without its int8 accuracy gate: random
    # weights give near-uniform next-token distributions, whose near-ties flip under any
    # rounding (accuracy is measured on the trained model above).
    fp32 = folder / "gpt2-fp32" / "model.onnx"
    export_onnx(model, fp32, vocab_size=config.vocab_size, max_sequence=config.block_size)
    paths = {"fp32": fp32, "int8": quantize_int8(fp32, folder / "gpt2-int8" / "model.onnx")[0]}
    del model
    rng = np.random.default_rng(0)
    rows = []
    for batch, length in ((1, 32), (1, 128), (8, 32), (8, 128)):
        ids = rng.integers(0, config.vocab_size, (batch, length), dtype=np.int64)
        row = {"batch": batch, "tokens": length}
        for precision, path in paths.items():
            row[f"{precision}_ms"] = round(timed(ort_session(path), ids, runs), 1)
        row["speedup"] = round(row["fp32_ms"] / row["int8_ms"], 2)
        rows.append(row)
    return {"model": f"{model_name} (random weights)", "file_bytes": {p: paths[p].stat().st_size for p in paths},
            "runs": runs, "rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-steps", type=int, default=300)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--train-batch", type=int, default=32, help="sequences per training step")
    parser.add_argument("--windows", type=int, default=2048, help="held-out windows (and random requests) compared")
    parser.add_argument("--speed-model", choices=("gpt2-124m", "small"), default="gpt2-124m",
                        help="the model timed: the served shape, or the small trained one's")
    # Smoke: small steps, enough of them for the int8 export's agreement check to pass (an
    # untrained model's near-ties flip under rounding), a few windows, the small model timed once.
    opts = options.parse(parser, {"train_steps": SMOKE_STEPS, "train_batch": 1, "runs": 1, "windows": 64,
                                  "speed_model": "small"})
    torch.set_num_threads(max(1, torch.get_num_threads()))
    machine = record()
    with tempfile.TemporaryDirectory(prefix="mlplat-bench-quantize-") as folder:
        accurate = accuracy(opts.train_steps, Path(folder), opts.windows, opts.train_batch)
        fast = speed(opts.runs, Path(folder), opts.speed_model)
    machine = finish(machine)
    report = {"machine": describe(machine), "cpu": machine, "date": date.today().isoformat(), "measured": MEASURED,
              "accuracy": accurate, "speed": fast}
    options.write(options.output(opts, RESULTS), report)
    print(f"machine: {report['machine']}; {MEASURED}")
    bpb = accurate["bits_per_byte"]
    print(f"accuracy ({accurate['model']['params']:,} params, {accurate['train']['steps']} steps): held-out bits per "
          f"byte fp32 {bpb['fp32']} / int8 {bpb['int8']}; top-1 agreement {accurate['held_out_top1_agreement']:.1%} "
          f"(held-out), {accurate['random_ids']['top1']:.1%} (random ids); mean KL "
          f"{accurate['random_ids']['mean_kl']:.2e} nats")
    print(f"speed ({fast['model']}; files {fast['file_bytes']['fp32'] / 2**20:.0f} MiB fp32, "
          f"{fast['file_bytes']['int8'] / 2**20:.0f} MiB int8):")
    print("| batch | tokens | fp32 ms | int8 ms | speed-up |")
    print("|---|---|---|---|---|")
    for row in fast["rows"]:
        print(f"| {row['batch']} | {row['tokens']} | {row['fp32_ms']} | {row['int8_ms']} | {row['speedup']}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
