"""`python -m workloads.monitor drift --reference <parquet> --current <parquet> [--json PATH] [--max-rows N]
[--max-columns N] [--min-rows N]`

Exit 0: no column drifted. Exit 1: at least one did; each is named on stdout and in the
JSON with its test, score and the threshold it was held to (and, where the test is a
distance, the p-value and the Holm level that also had to be passed); so does a column that has
values in one sample and none in the other. A run of unchanged data says "drift" at most
5% of the time, however many columns it has (workloads/monitor/alarm.py). A column that cannot be judged (nested, a point in time, no values in either
sample...) is named with why, on stdout and under `not_judged` in the JSON. Exit 2: bad
input, one line on stderr (a file that is missing, empty, not Parquet or not a regular file;
a sample of fewer rows than --min-rows, default 300;
more rows or columns than --max-rows and --max-columns allow, checked from the Parquet
footer before any data is read; a current sample whose columns are not the reference's; no
column that can be judged).

`python -m workloads.monitor log-requests --model M --bucket B --field input_ids=personal ...`
runs the request logger the inference gateway mirrors a sample of requests to, until it
is stopped (SIGTERM: what it holds is written first).

`python -m workloads.monitor drift-job --tracking-uri U --registered-model R --model M
--version N --logs s3://... [--pushgateway URL]` is the scheduled check: the served
version's training data (found through the lineage) against its logged requests. Exit 0
when it judged (drift or not: the verdict goes to Prometheus and the JSON on stdout), 2
when it cannot (no lineage, no logs)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workloads.arguments import real, whole
from workloads.inputs import InputError, shown
from workloads.monitor.alarm import MIN_ROWS
from workloads.monitor.drift import MAX_COLUMNS, MAX_ROWS

LIMIT = whole(1, 2**64)  # a count of rows or columns: nothing here counts past 2**64


class MonitorInputError(Exception):
    """Bad input: one line, exit 2."""


def drift(args: argparse.Namespace) -> int:
    from workloads.inputs import check_output, named
    from workloads.monitor.drift import judge, read_samples

    if args.json:
        check_output(args.json, "drift report")
    reference, current, not_judged = read_samples(args.reference, args.current, args.max_rows, args.max_columns)
    for flag, frame in (("reference", reference), ("current", current)):
        if len(frame) < args.min_rows:
            raise MonitorInputError(
                f"--{flag} {shown(getattr(args, flag))}: {len(frame)} rows; fewer than {args.min_rows} are not judged "
                "(below it a 0.5 sd shift in one of 20 columns is missed more than one time in ten: "
                "docs/monitoring.md); gather more, or lower --min-rows knowing the check will see less")
    verdict = judge(reference, current, not_judged)
    rows = {"reference": len(reference), "current": len(current)}
    report = {"drift": verdict.drift, "rows": rows, **verdict.as_dict()}
    if args.json:
        try:
            Path(args.json).write_text(json.dumps(report, indent=2, allow_nan=False) + "\n")
        except OSError as err:
            raise MonitorInputError(f"--json {shown(args.json)}: cannot be written ({err.strerror or err})") from None
    for r in verdict.drifted:
        held = "" if r.p_value_test == r.test else f"; {r.p_value_test} {r.p_value:.4g} (Holm level {r.level:.4g})"
        print(f"drift: {named(r.column)}: {r.test} {r.score:.4g} (threshold {r.threshold:g}){held}")
    for n in verdict.not_judged:
        print(f"not judged{' (counts as drift)' if n.counts_as_drift else ''}: {named(n.column)}: {n.reason}")
    unjudged = f", {len(verdict.not_judged)} not judged" if verdict.not_judged else ""
    print(f"{len(verdict.drifted)} of {len(verdict.columns)} columns drifted{unjudged} "
          f"({rows['reference']} reference rows, {rows['current']} current rows)")
    return 1 if verdict.drift else 0


def field_policy(fields: list[str], allow_personal: bool) -> Any:
    from workloads.monitor.request_log import FieldPolicy

    marked = {}
    for spec in fields:
        name, _, kind = spec.partition("=")
        if not name or kind not in ("personal", "plain"):
            raise MonitorInputError(f"--field {spec}: write NAME=personal or NAME=plain")
        marked[name] = kind == "personal"
    if not marked:
        raise MonitorInputError("--field: mark each input of the model personal or plain (e.g. input_ids=personal)")
    return FieldPolicy(marked, allow_personal=allow_personal)


def log_requests(args: argparse.Namespace) -> int:
    import signal

    # SIGTERM and SIGINT are taken by sigtimedwait in the main thread, never by a Python handler:
    # a handler runs only when the main thread next runs Python, and a signal the kernel hands to
    # one of the servers' threads leaves the main thread asleep until its wait times out, while
    # the kubelet's grace period runs out and the rows held are lost with the pod. Blocked before
    # any server starts, so every thread they start inherits the mask.
    # A handler that does nothing is installed too: as a container's PID 1 the kernel drops a
    # signal left at its default disposition, and this one is never at it.
    stopping = {signal.SIGTERM, signal.SIGINT}
    handlers = {s: signal.signal(s, lambda *_: None) for s in stopping}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, stopping)
    try:
        return _log_requests(args, stopping)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        for number, handler in handlers.items():
            signal.signal(number, handler)


def _log_requests(args: argparse.Namespace, stopping: set) -> int:
    import faulthandler
    import signal
    import socket

    import pyarrow.parquet  # noqa: F401 - loaded now, not inside the grace period of the last flush

    from workloads.monitor.logger import Sink, grpc_server, http_server
    from workloads.monitor.request_log import Batcher, s3_putter

    policy = field_policy(args.field, args.allow_personal)
    if args.max_rows < 1 or args.max_seconds <= 0:
        raise MonitorInputError("--max-rows and --max-seconds must be above 0")
    if not 0 < args.sample_percent <= 100:
        raise MonitorInputError(f"--sample-percent {args.sample_percent:g}: give a share above 0 and at most 100")
    batcher = Batcher(s3_putter(args.bucket, args.kms_key), prefix=args.prefix, model=args.model,
                      writer=socket.gethostname(), max_rows=args.max_rows, max_seconds=args.max_seconds)
    sink = Sink(policy, batcher, args.model)
    grpc = grpc_server(sink, args.grpc_port)
    http = http_server(sink, args.http_port)
    outputs = None
    if args.ext_proc_port:
        import grpc as grpclib
        from concurrent import futures

        from workloads.monitor.ext_proc import add_to

        # One thread per open stream: Envoy's shadow mode sends every request's stream.
        outputs = grpclib.server(futures.ThreadPoolExecutor(max_workers=64))
        add_to(outputs, sink, args.sample_percent)
        outputs.add_insecure_port(f"0.0.0.0:{args.ext_proc_port}")
        outputs.start()
    # `kill -USR1` prints every thread's stack to stderr: what a logger that will not stop is doing.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    print(f"logging {args.model} requests to s3://{args.bucket}/{args.prefix}/{args.model}/ (gRPC {args.grpc_port}, "
          f"HTTP {args.http_port})", flush=True)

    def lost() -> str:
        n = sink.lost()
        return f"{n} row{'' if n == 1 else 's'} held {'is' if n == 1 else 'are'} lost with the pod"

    def flush(last: bool = False) -> bool:
        try:
            sink.flush(last=last)
            return True
        except Exception as err:  # noqa: BLE001 - S3 unreachable or refusing: keep the rows, say so, go on
            print(f"request logs not written{'; ' + lost() if last else ' yet (kept for the next try)'}: "
                  f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}", file=sys.stderr,
                  flush=True)
            return False

    # The interval's writes run beside the main thread, which only waits for the stop: a SIGTERM
    # during a write is taken at once, and the stop's time counts from it. While one write is
    # still under way, the next interval's rows wait for the one after.
    interval: threading.Thread | None = None
    while signal.sigtimedwait(stopping, args.max_seconds) is None:
        if interval is None or not interval.is_alive():
            interval = threading.Thread(target=flush, name="interval-write", daemon=True)
            interval.start()
    # From here to exit within --stop-within, whatever S3 does: botocore bounds each socket
    # operation, not a write's attempts together, and a write already under way holds the rows
    # until it ends. The servers get a share of the time to finish what is in flight; rows that
    # reach the sink after the last write began are counted as lost.
    deadline = time.monotonic() + args.stop_within
    grace = min(5.0, args.stop_within / 4)
    grpc.stop(grace=grace).wait()
    if outputs is not None:
        outputs.stop(grace=grace).wait()
    http.shutdown()
    written = within(deadline - time.monotonic(), lambda: flush(last=True))
    if written is None:
        print(f"request logs not written: S3 did not answer within {args.stop_within:g} s of the stop; {lost()}",
              file=sys.stderr, flush=True)
        return 1
    if written and sink.late:
        print(f"request logs written, but not the requests still in flight at the stop: {lost()}", file=sys.stderr,
              flush=True)
        return 1
    return 0 if written else 1


def within(seconds: float, call: Callable[[], bool]) -> bool | None:
    """call() in a thread of its own, waited for `seconds` at most: its answer, or None if it
    has not ended. The thread is left behind: `python -m workloads.monitor` ends with os._exit,
    which does not wait for it (the interpreter's own exit would, and for the servers' pool
    threads behind it)."""
    answers: list[bool] = []
    worker = threading.Thread(target=lambda: answers.append(call()), name="last-write", daemon=True)
    worker.start()
    worker.join(max(seconds, 0.0))
    return answers[0] if answers else None


def drift_job(args: argparse.Namespace) -> int:
    from workloads.monitor.drift_job import DriftJobError, run

    if args.days < 1 or args.min_rows < 1:
        raise MonitorInputError("--days and --min-rows must be 1 or more")
    lustre = None
    if args.lustre_datasets:
        local, _, remote = args.lustre_datasets.partition("=")
        if not local.startswith("/") or not remote.startswith("s3://"):
            raise MonitorInputError(f"--lustre-datasets {args.lustre_datasets}: write /mount/datasets=s3://bucket/")
        lustre = (local, remote)
    try:
        report = run(tracking_uri=args.tracking_uri, registered_model=args.registered_model, model=args.model,
                     version=args.version, logs=args.logs, days=args.days, gateway=args.pushgateway,
                     min_rows=args.min_rows, lustre=lustre)
    except DriftJobError as err:
        raise MonitorInputError(str(err)) from None
    print(json.dumps(report))
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m workloads.monitor")
    verbs = top.add_subparsers(dest="verb", required=True)
    d = verbs.add_parser("drift", help="compare a current sample with the reference, column by column")
    d.add_argument("--reference", required=True, help="Parquet: the training reference sample")
    d.add_argument("--current", required=True, help="Parquet: the logged inputs to judge")
    d.add_argument("--json", help="also write the result here")
    d.add_argument("--max-rows", type=LIMIT, default=MAX_ROWS,
                   help=f"rows a sample may hold (default {MAX_ROWS:,}: what a check's memory fits)")
    d.add_argument("--max-columns", type=LIMIT, default=MAX_COLUMNS,
                   help=f"columns a sample may hold (default {MAX_COLUMNS}: Evidently takes about 0.1 s a column)")
    d.add_argument("--min-rows", type=LIMIT, default=MIN_ROWS,
                   help=f"rows each sample needs to be judged (default {MIN_ROWS}: the power docs/monitoring.md "
                        "derives)")
    d.set_defaults(run=drift)
    r = verbs.add_parser("log-requests", help="keep a sample of the gateway's requests in the region's bucket")
    r.add_argument("--model", required=True, help="the served model's name; requests for others are not kept")
    r.add_argument("--bucket", required=True, help="the datasets bucket")
    r.add_argument("--prefix", default="request-logs", help="key prefix; the bucket's retention rule expires it")
    r.add_argument("--kms-key", help="the bucket's KMS key (SSE-KMS on every object)")
    r.add_argument("--field", action="append", default=[], metavar="NAME=personal|plain",
                   help="each input of the model, marked; personal ones are dropped unless --allow-personal")
    r.add_argument("--allow-personal", action="store_true", help="keep personal fields too (the stack's opt-in)")
    r.add_argument("--grpc-port", type=int, default=8001)
    r.add_argument("--http-port", type=int, default=8000)
    r.add_argument("--ext-proc-port", type=int, default=0,
                   help="also take requests with their answers from Envoy's ext_proc filter (shadow mode) here")
    r.add_argument("--sample-percent", type=float, default=100.0,
                   help="share of the ext_proc streams kept (mirrored requests are sampled by the gateway)")
    r.add_argument("--max-rows", type=int, default=1000, help="rows per Parquet object at most")
    r.add_argument("--max-seconds", type=float, default=60.0, help="seconds a row waits to be written at most")
    r.add_argument("--stop-within", type=real(0, 3600, above_low=True), default=50.0,
                   help="seconds from SIGTERM to exit, the last write included (default 50: inside a pod's 60 s "
                        "grace period); rows not written by then are lost, and the logger says how many")
    r.set_defaults(run=log_requests)
    j = verbs.add_parser("drift-job", help="the served version's logged requests against its training data")
    j.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI"), required=
                   "MLFLOW_TRACKING_URI" not in os.environ, help="the MLflow server (default: $MLFLOW_TRACKING_URI)")
    j.add_argument("--registered-model", required=True, help="the registry's name of the served model")
    j.add_argument("--model", required=True, help="the Triton model name")
    j.add_argument("--version", type=int, required=True, help="the Triton version served")
    j.add_argument("--logs", required=True, help="the model's request logs: s3://<bucket>/request-logs/<model>/")
    j.add_argument("--days", type=int, default=1, help="days of logs to judge")
    j.add_argument("--min-rows", type=int, default=MIN_ROWS,
                   help=f"fewer logged requests than this are not judged (default {MIN_ROWS})")
    j.add_argument("--pushgateway", help="the Prometheus Pushgateway to push the scores to")
    j.add_argument("--lustre-datasets", metavar="/MOUNT/datasets=s3://BUCKET/",
                   help="training datasets read from Lustre are read from the bucket it mirrors instead")
    j.set_defaults(run=drift_job)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except (MonitorInputError, InputError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
