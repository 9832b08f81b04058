"""`python -m workloads.features <verb> --config feature_store.yaml`: the feature store's
verbs as the platform's pods and a tenant's pipelines run them.

    apply        register the definitions of a repository (a folder of Python files)
    materialize  copy new offline rows into the online store (the CronJob's verb)
    serve        the HTTP feature server with Prometheus metrics (the Deployment's verb)
    read         read features online through the in-process reader (workloads/features/reader.py)
    dataset      build a training dataset point-in-time correct and register it

Every verb checks the config and the definitions first (workloads/features/repo.py); bad
input is one line on stderr and exit 2. Numbers are bounded as they are read
(workloads/arguments.py): --port 1 to 65,535, --workers 1 to 64; --experiment, an MLflow
name, is printable text of at most 256 characters."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from datetime import datetime, timezone

from workloads.arguments import printable, quoted, whole
from workloads.features.repo import FeatureInputError, load_config, load_definitions, tenant_from_env

MAX_WORKERS = 64  # the feature server's processes: more than any pod has cores


class _Parser(argparse.ArgumentParser):
    """argparse's refusals as the verbs' own: one line, exit 2 (no usage block)."""

    def error(self, message: str) -> None:
        self.exit(2, f"error: {message}\n")


def _store(args: argparse.Namespace):
    tenant = tenant_from_env()
    config = load_config(args.config, tenant)
    from feast import FeatureStore  # after the checks: importing Feast takes seconds

    return tenant, FeatureStore(config=config)


def apply(args: argparse.Namespace) -> int:
    tenant, store = _store(args)
    objects = load_definitions(args.repo, tenant)
    store.apply(objects)
    # Feast adds its own placeholder entity (__dummy) for entity-less views: not the tenant's.
    applied = {f"{type(o).__name__}:{o.name}" for o in objects if not o.name.startswith("__")}
    print(json.dumps({"project": tenant.project, "applied": sorted(applied)}))
    return 0


def _iso_time(flag: str, value: str) -> datetime:
    """An ISO time from the command line; one without a zone is UTC."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise FeatureInputError(f"{flag}: {quoted(value)} is not an ISO time, e.g. 2026-11-20T12:00:00+00:00") \
            from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def materialize(args: argparse.Namespace) -> int:
    # The arguments first: a bad one stops before the registry is read.
    end = _iso_time("--end", args.end) if args.end else datetime.now(timezone.utc)
    start = _iso_time("--start", args.start) if args.start else None
    _, store = _store(args)
    if not store.list_feature_views():
        # A tenant that has applied nothing yet: the scheduled job succeeds with nothing to do.
        print(json.dumps({"project": store.project, "materialized_until": None, "feature_views": 0}))
        return 0
    if start:
        # A backfill of a window (Feast's `materialize`); otherwise from where the last run ended,
        # or for a new view from its TTL back (`materialize-incremental`), as the CronJob runs it.
        store.materialize(start, end)
    else:
        store.materialize_incremental(end_date=end)
    print(json.dumps({"project": store.project, "materialized_until": end.isoformat()}))
    return 0


def serve(args: argparse.Namespace) -> int:
    _, store = _store(args)
    from feast.feature_server import start_server

    start_server(store, host=args.host, port=args.port, no_access_log=True, workers=args.workers,
                 # No worker recycling: Feast's freshness gauge keeps a dead worker's last value
                 # (multiprocess "max"), which would hold a stale age in the alert.
                 worker_connections=1000, max_requests=0, max_requests_jitter=0, keep_alive_timeout=30,
                 registry_ttl_sec=60, tls_key_path="", tls_cert_path="", metrics=True)
    return 0


MAX_ENTITIES_TEXT = 1 << 20  # --entities is JSON on the command line: a megabyte is far past any request


def read(args: argparse.Namespace) -> int:
    """What the request path reads, for a person: the same reader, its result as JSON."""
    if len(args.entities) > MAX_ENTITIES_TEXT:
        raise FeatureInputError(f"--entities: {len(args.entities):,} characters; give at most {MAX_ENTITIES_TEXT:,}")
    try:
        entities = json.loads(args.entities)
    except (ValueError, RecursionError) as err:
        raise FeatureInputError(f"--entities: not JSON ({str(err)[:80]}); e.g. '{{\"customer_id\": [1, 2]}}'") from None
    if not isinstance(entities, dict) or not entities or not all(isinstance(v, list) for v in entities.values()):
        raise FeatureInputError("--entities: expected an object of join keys to lists of values, e.g. "
                                "'{\"customer_id\": [1, 2]}'")
    features = [f.strip() for f in args.features.split(",") if f.strip()]
    _, store = _store(args)
    from workloads.features.reader import FeatureReader, ReaderError

    try:
        with FeatureReader(store) as reader:
            result = reader.read(features, entities, full_feature_names=args.full_feature_names)
    except ReaderError as err:
        raise FeatureInputError(str(err)) from None
    print(json.dumps(result, default=str))
    return 0


def dataset(args: argparse.Namespace) -> int:
    from workloads.features.dataset import build, read_entities, register

    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,62}", args.name):
        raise FeatureInputError(f"--name {args.name!r}: use lowercase letters, digits, '.', '_' and '-' (a path "
                                "segment of the dataset's folder)")
    tenant, store = _store(args)
    entities = read_entities(args.entities)
    features = [f.strip() for f in args.features.split(",") if f.strip()]
    manifest, folder = build(store, tenant, entities, features, args.name)
    summary = {"id": manifest.id, "uri": folder, "rows": manifest.files[0].rows}
    uri = args.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        summary["run_id"] = register(manifest, folder, uri, args.experiment or f"{tenant.name}/features", args.name)
    print(json.dumps(summary))
    return 0


def parser() -> argparse.ArgumentParser:
    top = _Parser(prog="python -m workloads.features", description=__doc__.split("\n\n")[0])
    verbs = top.add_subparsers(dest="verb", required=True, parser_class=_Parser)

    def verb(name: str, run, help: str) -> argparse.ArgumentParser:
        p = verbs.add_parser(name, help=help)
        p.add_argument("--config", required=True, help="the tenant's feature_store.yaml")
        p.set_defaults(run=run)
        return p

    verb("apply", apply, "register a repository's definitions").add_argument(
        "--repo", required=True, help="folder of Python files defining entities, sources and feature views")
    m = verb("materialize", materialize, "copy new offline rows into the online store")
    m.add_argument("--start", help="backfill from this ISO time (default: where the last run ended)")
    m.add_argument("--end", help="materialize up to this ISO time (default: now)")
    s = verb("serve", serve, "run the HTTP feature server")
    s.add_argument("--host", default="0.0.0.0")  # noqa: S104 - the pod's address; the Service is in-cluster only
    s.add_argument("--port", type=whole(1, 65535), default=6566, help="1 to 65535")
    s.add_argument("--workers", type=whole(1, MAX_WORKERS), default=2, help="server processes, 1 to 64")
    r = verb("read", read, "read features online, as the request path does")
    r.add_argument("--features", required=True, help="comma-separated <feature view>:<feature>")
    r.add_argument("--entities", required=True, help='JSON: join keys to values, e.g. {"customer_id": [1, 2]}')
    r.add_argument("--full-feature-names", action="store_true", help="name columns <view>__<feature>")
    d = verb("dataset", dataset, "build and register a training dataset")
    d.add_argument("--entities", required=True, help="Parquet of entity keys and event_timestamp (local or s3://)")
    d.add_argument("--features", required=True, help="comma-separated <feature view>:<feature>")
    d.add_argument("--name", required=True, help="the dataset's name, e.g. churn-2026-11")
    d.add_argument("--tracking-uri", help="MLflow server (default: MLFLOW_TRACKING_URI; unset: not registered)")
    d.add_argument("--experiment", type=printable(256), help="default: <tenant>/features")
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    from workloads.tracking.client import TrackingError

    try:
        return args.run(args)
    except (FeatureInputError, TrackingError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Exception as err:
        # The registry module imports Feast, which takes seconds: only when a verb fails
        # (by then the verb has imported it), so bad input is refused without it.
        from workloads.features.registry import RegistryConflict

        if not isinstance(err, (RegistryConflict, PermissionError)):
            raise
        print(f"error: {err}", file=sys.stderr)
        return 1
