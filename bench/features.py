"""The feature server's latency and throughput against a direct redis-py read of the same keys.

What is measured (real servers, all on this machine over loopback):
- a real redis-server with TLS and a tenant's ACL user, as tests/services starts it;
- Feast's HTTP feature server (`python -m workloads.features serve`, 2 workers as the
  Deployment runs it), reading through the platform's IAM-token online store, its registry
  in S3 (a moto server; cached, not on the request path);
- the direct read: the same Redis keys and hash fields Feast reads (one pipelined HMGET
  per entity, as Feast's store does), with redis-py over TLS;
- between them, Feast's SDK in process (`get_online_features`, no HTTP): how much of the
  server's cost is Feast's own work on a read, and how much is HTTP and JSON.

For 1, 10 and 100 entities per request: p50/p99 latency of sequential requests, and
throughput with 8 concurrent clients. Clients, server and Redis share the machine's cores,
so the throughput is the machine's, not the server's alone. The goal the issue sets: the
server adds at most 2x the direct read's p99.

Run: `python bench/features.py` (the driver runs in the project's environment and the load
in `.venv-features`, which holds Feast). The record goes to bench/results/features.json.
`python bench/features.py --smoke [--output FILE]`: 200 entities, 10 requests and a fifth of
a second of load per size and path (bench/options.py).
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


def _latencies(call, batches: list[list[int]]) -> dict[str, float]:
    import time

    times = []
    for ids in batches:
        started = time.perf_counter()
        call(ids)
        times.append(1000 * (time.perf_counter() - started))
    import numpy as np

    p50, p99 = np.percentile(times, [50, 99], method="nearest")
    return {"p50_ms": round(float(p50), 3), "p99_ms": round(float(p99), 3), "requests": len(times)}


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
    return {"requests_per_s": round(total / seconds, 1),
            "entities_per_s": round(total * len(batches[0]) / seconds, 1)}


def load(opts: argparse.Namespace) -> int:
    """In `.venv-features`: write the entities online, start the server, measure both paths."""
    import io
    import random
    import time
    from datetime import datetime, timedelta, timezone

    import boto3
    import pandas as pd
    import redis
    import requests
    import yaml
    from feast import Entity, FeatureStore, FeatureView, Field, FileSource, ValueType
    from feast.infra.online_stores.helpers import _mmh3, _redis_key
    from feast.protos.feast.types.EntityKey_pb2 import EntityKey
    from feast.protos.feast.types.Value_pb2 import Value
    from feast.repo_config import RepoConfig
    from feast.types import Float64, Int64

    data = yaml.safe_load(Path(opts.config).read_text())
    store = FeatureStore(config=RepoConfig(repo_path=Path(opts.config).parent, **data))
    now = datetime.now(timezone.utc)
    entities = opts.entities
    frame = pd.DataFrame({"customer_id": range(entities), "spend": [i * 0.5 for i in range(entities)],
                          "visits": list(range(entities)), "event_timestamp": [now] * entities})
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    key = f"features/{TENANT}/bench/customers.parquet"
    boto3.client("s3").put_object(Bucket="datasets", Key=key, Body=buffer.getvalue())
    customer = Entity(name="customer", join_keys=["customer_id"], value_type=ValueType.INT64)
    view = FeatureView(name="customer_stats", entities=[customer], ttl=timedelta(days=1),
                       schema=[Field(name="spend", dtype=Float64), Field(name="visits", dtype=Int64)],
                       source=FileSource(path=f"s3://datasets/{key}", timestamp_field="event_timestamp",
                                         s3_endpoint_override=os.environ["AWS_ENDPOINT_URL"]))
    store.apply([customer, view])
    store.write_to_online_store("customer_stats", frame)

    log = Path(opts.config).with_name("serve.log")
    port = opts.port
    server = subprocess.Popen([sys.executable, "-m", "workloads.features", "serve", "--config", opts.config,
                               "--host", "127.0.0.1", "--port", str(port), "--workers", "2"],
                              cwd=REPO, stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/get-online-features"
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

        fields = [_mmh3(f"customer_stats:{f}") for f in ("spend", "visits")] + [b"_ts:customer_stats"]
        keys = [_redis_key(data["project"], EntityKey(join_keys=["customer_id"], entity_values=[Value(int64_val=i)]),
                           entity_key_serialization_version=3) for i in range(entities)]

        def direct_call():
            client = redis.Redis(host="127.0.0.1", port=opts.redis_port, ssl=True, ssl_ca_certs=opts.ca,
                                 username=opts.user, password="iam-token-stand-in")

            def call(ids: list[int]) -> list:
                with client.pipeline(transaction=False) as pipe:
                    for i in ids:
                        pipe.hmget(keys[i], fields)
                    return pipe.execute()
            return call

        def sdk_call():
            # Feast's SDK in process, no HTTP: what the server's own work costs.
            own = FeatureStore(config=RepoConfig(repo_path=Path(opts.config).parent, **data))

            def call(ids: list[int]) -> dict:
                return own.get_online_features(features=FEATURES, entity_rows=[{"customer_id": i} for i in ids]).to_dict()
            return call

        def server_call():
            session = requests.Session()

            def call(ids: list[int]) -> dict:
                reply = session.post(url, json={"features": FEATURES, "entities": {"customer_id": ids}}, timeout=30)
                reply.raise_for_status()
                return reply.json()
            return call

        # Both paths return the same values for the same entities before anything is timed.
        probe = [7, entities - 1]
        served = server_call()(probe)
        columns = {n: r["values"] for n, r in zip(served["metadata"]["feature_names"], served["results"])}
        assert columns["spend"] == [i * 0.5 for i in probe] and columns["visits"] == probe, columns
        assert all(v[0] is not None for v in direct_call()(probe))

        rng = random.Random(0)
        results = {}
        for size in SIZES:
            batches = [rng.sample(range(entities), size) for _ in range(opts.requests)]
            warm = batches[: max(20, opts.requests // 10)]
            row = {}
            for name, make in (("direct", direct_call), ("sdk", sdk_call), ("server", server_call)):
                call = make()
                for ids in warm:
                    call(ids)
                row[name] = {**_latencies(call, batches), **_throughput(make, batches, opts.seconds)}
            row["added_p99_ms"] = round(row["server"]["p99_ms"] - row["direct"]["p99_ms"], 3)
            row["added_over_direct_p99"] = round(row["added_p99_ms"] / row["direct"]["p99_ms"], 2)
            results[str(size)] = row
        print(json.dumps(results))
    finally:
        server.terminate()
        server.wait(timeout=30)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=500, help="sequential requests per size and path")
    parser.add_argument("--seconds", type=float, default=5.0, help="throughput window per size and path")
    parser.add_argument("--entities", type=int, default=ENTITIES, help=f"entities online (at least {max(SIZES)})")
    parser.add_argument("--load", action="store_true", help=argparse.SUPPRESS)
    for hidden in ("--config", "--ca", "--user"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--redis-port", type=int, help=argparse.SUPPRESS)
    from bench import options  # the standard library only: the load's interpreter imports it too

    opts = options.parse(parser, {"requests": 10, "seconds": 0.2, "entities": 200})
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
    processes: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="mlplat-bench-features-") as folder:
        s3 = start_moto(processes)
        stack = FeatureStack(Path(folder), None, s3)  # type: ignore[arg-type]
        redis = start_redis(Path(folder) / "redis", {stack.user(TENANT): TENANT})
        stack.redis = redis
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
                 "--redis-port", str(redis.port), "--requests", str(opts.requests), "--seconds", str(opts.seconds),
                 "--entities", str(opts.entities)],
                cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
        finally:
            redis.stop()
            for process in processes:
                process.terminate()
    if done.returncode:
        print(done.stderr[-3000:], file=sys.stderr)
        return 1
    results = json.loads(done.stdout.strip().splitlines()[-1])
    machine = finish(machine)
    print(f"feature server vs direct redis-py read, {opts.entities} entities online; {describe(machine)}")
    print("measured: a real redis-server (TLS, ACL user) and Feast's HTTP server (2 workers) over loopback")
    print(f"{'entities':>8}  {'path':<6} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>9} {'entities/s':>11}")
    for size, row in results.items():
        for name in ("direct", "sdk", "server"):
            r = row[name]
            print(f"{size:>8}  {name:<6} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['requests_per_s']:>9.1f} "
                  f"{r['entities_per_s']:>11.1f}")
        met = row["added_over_direct_p99"] <= 2
        print(f"{'':>8}  server adds {row['added_p99_ms']:.2f} ms at p99 = {row['added_over_direct_p99']:.1f}x the "
              f"direct read's p99 (goal <= 2x): {'met' if met else 'NOT met'}")
    options.write(options.output(opts, RESULTS), {
        "machine": describe(machine), "cpu": machine, "date": str(date.today()),
        "measured": "real servers over loopback: redis-server 7 (TLS, ACL user), Feast 0.66 HTTP feature server "
                    "(2 workers, IAM-token online store), moto S3 for the registry; clients on the same machine",
        "entities_online": opts.entities, "requests_per_size": opts.requests, "throughput_clients": CLIENTS,
        "throughput_seconds": opts.seconds, "goal": "server's added p99 <= 2x the direct read's p99",
        "results": results,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
