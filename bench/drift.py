"""How long the drift check takes on a large sample: `python -m workloads.monitor drift` over
a reference and a current Parquet file of 1,000,000 rows x 20 numeric columns each (one
column shifted by 0.3 standard deviations), measured end to end as its job runs it: reading
both files, Evidently's per-column tests, the verdict. Target: under 60 s on 2 cores.

What is measured: the real CLI in a subprocess, on this machine; no server is involved.

    .venv/bin/python bench/drift.py [--rows 1000000] [--columns 20]
    .venv/bin/python bench/drift.py --smoke [--output FILE]   # 1,000 rows x 8 columns (f07 is shifted)
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import options  # noqa: E402
from bench.machine import describe, finish, record  # noqa: E402

RESULTS = REPO / "bench" / "results" / "drift.json"
TARGET_S = 60.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--columns", type=int, default=20, help="numeric columns, f00 to f<N-1> (f07 is shifted: "
                        "at least 8)")
    opts = options.parse(parser, {"rows": 1000, "columns": 8})
    if opts.columns < 8:
        parser.error("--columns must be at least 8: f07 is the shifted column")

    import numpy as np
    import pandas as pd

    machine = record()
    names = [f"f{i:02d}" for i in range(opts.columns)]
    with tempfile.TemporaryDirectory(prefix="mlplat-bench-drift-") as folder:
        rng = np.random.default_rng(0)
        reference = Path(folder) / "reference.parquet"
        current = Path(folder) / "current.parquet"
        pd.DataFrame(rng.normal(size=(opts.rows, opts.columns)), columns=names).to_parquet(reference, index=False)
        shifted = pd.DataFrame(rng.normal(size=(opts.rows, opts.columns)), columns=names)
        shifted["f07"] += 0.3
        shifted.to_parquet(current, index=False)
        del shifted
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "workloads.monitor", "drift", "--reference", str(reference),
                               "--current", str(current), "--json", str(Path(folder) / "drift.json")],
                              cwd=REPO, capture_output=True, text=True, timeout=900)
        seconds = time.perf_counter() - started
        if done.returncode not in (0, 1):
            print(done.stderr[-2000:], file=sys.stderr)
            return 1
        report = json.loads((Path(folder) / "drift.json").read_text())
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    machine = finish(machine)
    drifted = [c["column"] for c in report["drifted"]]
    print(f"drift check, {opts.rows:,} rows x {opts.columns} columns, reference and current: {seconds:.1f} s, "
          f"peak {peak_mib:,.0f} MiB (target < {TARGET_S:.0f} s: {'met' if seconds < TARGET_S else 'NOT met'})")
    print(f"  drifted: {', '.join(drifted) or 'none'} (f07 was shifted by 0.3 sd)")
    print(f"  {describe(machine)}; measured: the real CLI in a subprocess, no server")
    options.write(options.output(opts, RESULTS), {
        "machine": describe(machine), "cpu": machine, "date": str(date.today()),
        "measured": "python -m workloads.monitor drift in a subprocess: Parquet reads, Evidently's tests, verdict",
        "rows": opts.rows, "columns": opts.columns, "seconds": round(seconds, 2), "peak_mib": round(peak_mib),
        "target_s": TARGET_S, "target_met": seconds < TARGET_S, "drifted": drifted,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
