"""The online reader and the feature server against a direct Redis read of the same keys.

What is measured (real servers, all on this machine over loopback):
- a real redis-server with TLS and a tenant's ACL user, as tests/services starts it;
- the baseline: what any reader must do at least, by hand: the keys in Feast's layout,
  one pipelined HMGET per entity over TLS as the same ACL user, the values decoded to
  Python (`Value.FromString` and the field of its type), into get_online_features' shape;
- the online reader (workloads/features/reader.py), in process, through the platform's
  IAM-token online store;
- Feast's SDK in process (`get_online_features(...).to_dict()`), no HTTP;
- Feast's HTTP feature server (`python -m workloads.features serve`, 2 workers as the
  Deployment runs it), for remote callers, with two clients: `http.client` and
  `requests.Session`, so the client's own cost is seen apart.

For 1, 10 and 100 entities per request, closed loop (each request when the last returns):
p50, p99 and p99.9 of `--requests` samples, `--repeats` times for the baseline and the
reader (their median and spread), once with `--other-requests` for the SDK and the server.
The baseline's and the reader's runs take turns, so a noisy moment falls on both. Open loop
at half the baseline's closed-loop rate (latency from when each request was due, so a slow
one delays those queued behind it and counts against them). Spikes: the reader while its
registry is refreshed every 50 ms, and while every 100th call renews its IAM token on a
new TLS connection. Redis (and the feature server) run on core 0, the clients on core 1.
The goal: the reader's p99 within 2x the baseline's at every size.

Run: `python bench/features.py` (the driver runs in the project's environment and the load
in `.venv-features`, which holds Feast). The record goes to bench/results/features.json.
`python bench/features.py --smoke [--output FILE]`: 200 entities and a few requests per
size and path (bench/options.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

RESULTS = REPO / "bench" / "results" / "features.json"
TENANT = "research"
ENTITIES = 10_000
SIZES = (1, 10, 100)
FEATURES = ["customer_stats:spend", "customer_stats:visits"]
CLIENTS = 8
GOAL = 2.0  # the reader's p99 over the baseline's


def _percentiles(times_ms: list[float]) -> dict[str, float]:
    import numpy as np

    p50, p99, p999 = np.percentile(times_ms, [50, 99, 99.9], method="nearest")
    return {"p50_ms": round(float(p50), 3), "p99_ms": round(float(p99), 3), "p999_ms": round(float(p999), 3),
            "max_ms": round(max(times_ms), 3), "requests": len(times_ms)}


def _closed(call, batches: list[list[int]]) -> dict[str, float]:
    import time

    times = []
    for ids in batches:
        started = time.perf_counter()
        call(ids)
        times.append(1000 * (time.perf_counter() - started))
    return _percentiles(times)


def _open(call, batches: list[list[int]], rate: float) -> dict[str, float]:
    """Each request due at a fixed interval; its latency counts from when it was due."""
    import time

    times = []
    start = time.perf_counter() + 0.01
    for n, ids in enumerate(batches):
        due = start + n / rate
        while time.perf_counter() < due:
            pass
        call(ids)
        times.append(1000 * (time.perf_counter() - due))
    return {**_percentiles(times), "rate_per_s": rate}


def _interleaved(calls: dict, batches: list[list[int]], repeats: int) -> dict[str, dict]:
    """`repeats` closed-loop runs of each path, taking turns (A B A B ...), so a noisy
    moment of the machine falls on both: each percentile's median over the runs, the p99's
    spread, and each turn's p99 ratio of the second path over the first."""
    import statistics

    runs: dict[str, list[dict]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            runs[name].append(_closed(call, batches))
    merged = {}
    for name, rs in runs.items():
        merged[name] = {**{k: round(statistics.median(r[k] for r in rs), 3) for k in ("p50_ms", "p99_ms", "p999_ms")},
                        "max_ms": max(r["max_ms"] for r in rs), "requests": rs[0]["requests"], "repeats": repeats,
                        "p99_spread_ms": [min(r["p99_ms"] for r in rs), max(r["p99_ms"] for r in rs)]}
    first, second = list(runs)
    merged[second]["p99_ratio_per_turn"] = [round(b["p99_ms"] / a["p99_ms"], 2)
                                            for a, b in zip(runs[first], runs[second])]
    return merged


def _throughput(make_call, batches: list[list[int]], seconds: float) -> dict[str, float]:
    """CLIENTS threads, each with its own connection, calling for `seconds`."""
    import threading
    import time

    counts = [0] * CLIENTS
    stop = time.perf_counter() + seconds

    def client(i: int) -> None:
        call = make_call()
        n = 0
        while time.perf_counter() < stop:
            call(batches[(i * 7919 + n) % len(batches)])
            n += 1
        counts[i] = n

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = sum(counts)
    return {"requests_per_s": round(total / seconds, 1), "entities_per_s": round(total * len(batches[0]) / seconds, 1)}


def load(opts: argparse.Namespace) -> int:
    """In `.venv-features`: write the entities online, start the server, measure every path."""
    import gc
    import http.client
    import random
    import struct
    import threading
    import time
    from datetime import datetime, timedelta, timezone

    import redis
    import requests
    import yaml
    from feast import Entity, FeatureStore, FeatureView, Field, FileSource, ValueType
    from feast.infra.online_stores.helpers import _mmh3, _redis_key
    from feast.protos.feast.types.EntityKey_pb2 import EntityKey
    from feast.protos.feast.types.Value_pb2 import Value
    from feast.repo_config import RepoConfig
    from feast.types import Float64, Int64

    from workloads.features.reader import FeatureReader

    if opts.pin:
        os.sched_setaffinity(0, {1})
    data = yaml.safe_load(Path(opts.config).read_text())
    store = FeatureStore(config=RepoConfig(repo_path=Path(opts.config).parent, **data))
    now = datetime.now(timezone.utc)
    entities = opts.entities
    customer = Entity(name="customer", join_keys=["customer_id"], value_type=ValueType.INT64)
    view = FeatureView(name="customer_stats", entities=[customer], ttl=timedelta(days=1),
                       schema=[Field(name="spend", dtype=Float64), Field(name="visits", dtype=Int64)],
                       source=FileSource(path=f"s3://datasets/features/{TENANT}/bench/customers.parquet",
                                         timestamp_field="event_timestamp"))
    store.apply([customer, view])
    store._get_provider().online_store.online_write_batch(store.config, store.get_feature_view("customer_stats"), [
        (EntityKey(join_keys=["customer_id"], entity_values=[Value(int64_val=i)]),
         {"spend": Value(double_val=i * 0.5), "visits": Value(int64_val=i)}, now, None) for i in range(entities)], None)

    log = Path(opts.config).with_name("serve.log")
    port = opts.port
    server = subprocess.Popen([sys.executable, "-m", "workloads.features", "serve", "--config", opts.config,
                               "--host", "127.0.0.1", "--port", str(port), "--workers", "2"],
                              cwd=REPO, stdout=log.open("w"), stderr=subprocess.STDOUT)
    if opts.pin:
        os.sched_setaffinity(server.pid, {0})  # its workers inherit it
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=1).ok:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError(f"feature server did not start: {log.read_text()[-1500:]}")
            time.sleep(0.3)

        fields = [_mmh3(f"customer_stats:{f}") for f in ("spend", "visits")]
        head = struct.pack("<III", 1, ValueType.STRING.value, len(b"customer_id")) + b"customer_id" + \
            struct.pack("<II", ValueType.INT64.value, 8)
        project = data["project"].encode()
        assert head + struct.pack("<q", 7) + project == _redis_key(data["project"], EntityKey(
            join_keys=["customer_id"], entity_values=[Value(int64_val=7)]), 3), "the baseline's keys are not Feast's"

        def decoded(raw: bytes | None):
            if not raw:
                return None
            value = Value.FromString(raw)
            return getattr(value, value.WhichOneof("val"))

        def baseline_call():
            client = redis.Redis(host="127.0.0.1", port=opts.redis_port, ssl=True, ssl_ca_certs=opts.ca,
                                 username=opts.user, password="iam-token-stand-in")

            def call(ids: list[int]) -> dict:
                pipe = client.pipeline(transaction=False)
                for i in ids:
                    pipe.hmget(head + struct.pack("<q", i) + project, fields)
                spend, visits = [], []
                for s, v in pipe.execute():
                    spend.append(decoded(s))
                    visits.append(decoded(v))
                return {"customer_id": ids, "spend": spend, "visits": visits}
            return call

        # One reader, as a service holds one (it is thread-safe): one registry thread.
        reader = FeatureReader(FeatureStore(config=RepoConfig(repo_path=Path(opts.config).parent, **data)))

        def reader_call():
            def call(ids: list[int]) -> dict:
                return reader.read(FEATURES, {"customer_id": ids})
            return call

        def sdk_call():
            own = FeatureStore(config=RepoConfig(repo_path=Path(opts.config).parent, **data))

            def call(ids: list[int]) -> dict:
                return own.get_online_features(features=FEATURES, entity_rows=[{"customer_id": i} for i in ids]).to_dict()
            return call

        def requests_call():
            session = requests.Session()

            def call(ids: list[int]) -> dict:
                reply = session.post(f"http://127.0.0.1:{port}/get-online-features",
                                     json={"features": FEATURES, "entities": {"customer_id": ids}}, timeout=30)
                reply.raise_for_status()
                return reply.json()
            return call

        def http_client_call():
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

            def call(ids: list[int]) -> dict:
                body = json.dumps({"features": FEATURES, "entities": {"customer_id": ids}})
                connection.request("POST", "/get-online-features", body, {"Content-Type": "application/json"})
                reply = connection.getresponse()
                payload = reply.read()
                if reply.status != 200:
                    raise RuntimeError(f"feature server: {reply.status} {payload[:200]!r}")
                return json.loads(payload)
            return call

        paths = {"baseline": baseline_call, "reader": reader_call, "sdk": sdk_call,
                 "server_requests": requests_call, "server_http_client": http_client_call}
        # Every path returns the same values for the same entities before anything is timed.
        probe = [7, entities - 1]
        want = {"customer_id": probe, "spend": [i * 0.5 for i in probe], "visits": probe}
        for name in ("baseline", "reader", "sdk"):
            got = paths[name]()(probe)
            assert got == want, (name, got)
        for name in ("server_requests", "server_http_client"):
            served = paths[name]()(probe)
            assert {n: r["values"] for n, r in zip(served["metadata"]["feature_names"], served["results"])} == want

        # Collections of the objects Feast and the imports made at start (the same for every
        # path) are taken out of the timings, as a service does with gc.freeze() once loaded.
        gc.collect()
        gc.freeze()
        rng = random.Random(0)
        rows = []
        for size in SIZES:
            batches = [rng.sample(range(entities), size) for _ in range(opts.requests)]
            row: dict = {"entities": size}
            warm = batches[: max(20, opts.requests // 20)]

            def ready(name: str):
                """A new client of the path, warmed: made just before it is timed, since the
                server closes a connection idle for 30 s (its keep-alive)."""
                call = paths[name]()
                for ids in warm:
                    call(ids)
                return call

            calls = {name: ready(name) for name in ("baseline", "reader")}
            row.update(_interleaved(calls, batches, opts.repeats))
            # Open loop at half what the baseline can do closed-loop, the same rate for both.
            rate = round(min(opts.rate, 500 / row["baseline"]["p50_ms"]), 1)
            for name in ("baseline", "reader"):
                row[name]["open_loop"] = _open(calls[name], batches[: opts.open_requests], rate)
            for name in ("sdk", "server_requests", "server_http_client"):
                row[name] = _closed(ready(name), batches[: opts.other_requests])
            for name in ("reader", "server_http_client"):
                row[name].update(_throughput(paths[name], batches, opts.seconds))
            row["reader_p99_ratio"] = round(row["reader"]["p99_ms"] / row["baseline"]["p99_ms"], 2)
            row["server_p99_ratio"] = round(row["server_http_client"]["p99_ms"] / row["baseline"]["p99_ms"], 2)
            rows.append(row)

        # Spikes, at 10 entities: the reader while its registry is read again and again...
        batches = [rng.sample(range(entities), 10) for _ in range(opts.requests)]
        stop = threading.Event()

        def refreshing() -> None:
            while not stop.wait(0.05):
                reader.refresh()

        thread = threading.Thread(target=refreshing)
        thread.start()
        try:
            during_refresh = _closed(reader_call(), batches)
        finally:
            stop.set()
            thread.join()
        # ...and while every 100th call renews its IAM token on a new TLS connection.
        pool = reader._client.connection_pool
        credentials = pool.connection_kwargs["credential_provider"]

        plain = reader_call()

        def renewing(ids: list[int], n=iter(range(1 << 62))) -> dict:
            if next(n) % 100 == 0:
                credentials._made = -1e9  # the token is past its renewal time
                pool.disconnect()
            return plain(ids)

        during_renewal = _closed(renewing, batches)
        print(json.dumps({"rows": rows, "spikes": {"entities": 10, "during_registry_refresh": during_refresh,
                                                   "during_token_renewal": during_renewal,
                                                   "refreshes": "every 50 ms", "renewals": "every 100th call"}}))
        reader.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=10_000,
                        help="closed-loop samples per size for the baseline and the reader")
    parser.add_argument("--repeats", type=int, default=5, help="closed-loop runs of the baseline and the reader")
    parser.add_argument("--other-requests", type=int, default=2_000, help="samples per size for the SDK and server")
    parser.add_argument("--open-requests", type=int, default=5_000, help="open-loop samples per size")
    parser.add_argument("--rate", type=float, default=5000.0,
                        help="open-loop requests per second at most (else half the baseline's closed-loop rate)")
    parser.add_argument("--seconds", type=float, default=3.0, help="throughput window per size and path")
    parser.add_argument("--entities", type=int, default=ENTITIES, help=f"entities online (at least {max(SIZES)})")
    parser.add_argument("--load", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--pin", action="store_true", help=argparse.SUPPRESS)
    for hidden in ("--config", "--ca", "--user"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--redis-port", type=int, help=argparse.SUPPRESS)
    from bench import options  # the standard library only: the load's interpreter imports it too

    opts = options.parse(parser, {"requests": 20, "repeats": 1, "other_requests": 10, "open_requests": 10,
                                  "seconds": 0.2, "entities": 200})
    if opts.entities < max(SIZES):
        parser.error(f"--entities must be at least {max(SIZES)}: the largest request reads that many")
    if opts.load:
        return load(opts)

    from bench.machine import describe, finish, record
    from tests.services.features import FEATURES_VENV, FeatureStack, start_redis
    from tests.services.oci import free_port
    from tests.services.tracking import REGION, aws_env, start_moto

    if not (FEATURES_VENV / "bin" / "python").exists():
        print(f"{FEATURES_VENV} lacks Feast: run `make setup`", file=sys.stderr)
        return 2
    machine = record()
    pin = len(os.sched_getaffinity(0)) >= 2
    processes: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="mlplat-bench-features-") as folder:
        s3 = start_moto(processes)
        stack = FeatureStack(Path(folder), None, s3)  # type: ignore[arg-type]
        redis = start_redis(Path(folder) / "redis", {stack.user(TENANT): TENANT})
        stack.redis = redis
        if pin:
            os.sched_setaffinity(redis.process.pid, {0})
        try:
            import boto3

            boto3.client("s3", endpoint_url=s3, aws_access_key_id="testing", aws_secret_access_key="testing",
                         region_name=REGION).create_bucket(Bucket="datasets",
                                                           CreateBucketConfiguration={"LocationConstraint": REGION})
            config = stack.config(TENANT)
            env = {**stack.env(TENANT), **aws_env(s3)}
            done = subprocess.run(
                [str(FEATURES_VENV / "bin" / "python"), __file__, "--load", "--config", str(config),
                 "--ca", str(redis.ca), "--user", stack.user(TENANT), "--port", str(free_port()),
                 "--redis-port", str(redis.port), "--requests", str(opts.requests), "--repeats", str(opts.repeats),
                 "--other-requests", str(opts.other_requests), "--open-requests", str(opts.open_requests),
                 "--rate", str(opts.rate), "--seconds", str(opts.seconds), "--entities", str(opts.entities),
                 *(["--pin"] if pin else [])],
                cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
        finally:
            redis.stop()
            for process in processes:
                process.terminate()
    if done.returncode:
        print(done.stderr[-3000:], file=sys.stderr)
        return 1
    results = json.loads(done.stdout.strip().splitlines()[-1])
    machine = finish(machine)
    print(f"online reader and feature server vs a direct Redis read, {opts.entities} entities online; "
          f"{describe(machine)}")
    print("measured: a real redis-server (TLS, ACL user), the reader in process, Feast's HTTP server (2 workers) "
          f"over loopback; Redis and server on core 0, clients on core 1: {pin}")
    print(f"{'entities':>8}  {'path':<18} {'p50 ms':>8} {'p99 ms':>8} {'p99.9 ms':>9}")
    for row in results["rows"]:
        for name in ("baseline", "reader", "sdk", "server_requests", "server_http_client"):
            r = row[name]
            print(f"{row['entities']:>8}  {name:<18} {r['p50_ms']:>8.3f} {r['p99_ms']:>8.3f} {r['p999_ms']:>9.3f}")
        met = row["reader_p99_ratio"] <= GOAL
        print(f"{'':>8}  reader p99 = {row['reader_p99_ratio']:.2f}x the baseline's (goal <= {GOAL:.0f}x): "
              f"{'met' if met else 'NOT met'}; open loop at {row['reader']['open_loop']['rate_per_s']:.0f}/s: reader p99 "
              f"{row['reader']['open_loop']['p99_ms']:.3f} vs {row['baseline']['open_loop']['p99_ms']:.3f} ms")
    spikes = results["spikes"]
    print(f"spikes at 10 entities: reader p99 {spikes['during_registry_refresh']['p99_ms']:.3f} ms (max "
          f"{spikes['during_registry_refresh']['max_ms']:.1f}) while the registry is refreshed every 50 ms; p99 "
          f"{spikes['during_token_renewal']['p99_ms']:.3f} ms (max {spikes['during_token_renewal']['max_ms']:.1f}) "
          "renewing the IAM token every 100th call")
    options.write(options.output(opts, RESULTS), {
        "machine": describe(machine), "cpu": machine, "date": str(date.today()),
        "measured": "real servers over loopback: redis-server 7 (TLS, ACL user); the online reader in process and "
                    "Feast 0.66's SDK through the IAM-token online store; Feast's HTTP feature server (2 workers); "
                    "moto S3 for the registry; clients on the same machine",
        "pinned": "redis-server and the feature server on core 0, the clients on core 1" if pin else "not pinned",
        "entities_online": opts.entities, "requests_per_size": opts.requests, "repeats": opts.repeats,
        "other_requests_per_size": opts.other_requests, "open_loop_requests": opts.open_requests,
        "open_loop_max_rate_per_s": opts.rate, "throughput_clients": CLIENTS, "throughput_seconds": opts.seconds,
        "goal": f"the reader's p99 <= {GOAL:.0f}x the baseline's at every size",
        "met": all(r["reader_p99_ratio"] <= GOAL for r in results["rows"]),
        "rows": results["rows"], "spikes": spikes,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
