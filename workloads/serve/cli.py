"""`python -m workloads.serve`: export a checkpoint into the Triton model repository,
render or check a model config, roll back a version, and smoke-test a deployed model.

    python -m workloads.serve export   --checkpoint DIR --repository DIR|s3://bucket/prefix [--stack NAME] ...
    python -m workloads.serve config   --vocab-size N [--stack NAME] ...     # print config.pbtxt
    python -m workloads.serve check    PATH/TO/<model>/config.pbtxt
    python -m workloads.serve rollback --repository DIR|s3://... --model-name NAME
    python -m workloads.serve canary   --stack NAME --repository DIR|s3://... --version N
    python -m workloads.serve smoke    --url HOST:8001 --model-name NAME [--ssl] [--token-file F] ...

Exit codes: 0 done, 1 a check failed (parity, smoke), 2 bad input (one line, no traceback).

Numbers are bounded as they are read (workloads/arguments.py): the serving settings by
Triton's own limits, with the sentence a stack file gets (spec.check_serving); a vocabulary
from 1 to 10,000,000; --cpu-threads 0 to 1,024; a version 1 to 2**63 - 1 (Triton's); the
smoke test's batch 1 to 1,024 requests of 1 to 32,768 tokens, 1 to 1,000 rounds, a latency
budget above 0 and at most an hour. Files are read through workloads/inputs.py: a
config.pbtxt up to 1 MiB, a token file up to 64 KiB, a CA bundle up to 1 MiB.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from workloads import inputs
from workloads.arguments import printable, real, whole
from workloads.serve.spec import (
    ACCELERATORS,
    DEVICES,
    INT64_MAX,
    MAX_VOCAB,
    PRECISIONS,
    ModelSpec,
    ServeSpecError,
    check_serving,
    gpu_refusal,
)

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
PROG = "python -m workloads.serve"

# Caps on what the verbs read and send (see the module's docstring).
CONFIG_LIMIT = 1 << 20  # a config.pbtxt is a few kilobytes
TOKEN_LIMIT = 64 << 10  # a JWT is a few kilobytes
CA_LIMIT = 1 << 20  # the whole public CA bundle is about 200 KB
MAX_CPU_THREADS = 1024  # ONNX Runtime threads per instance: more than any node has cores
MAX_SMOKE_BATCH = 1024  # requests in one smoke batch
MAX_SMOKE_TOKENS = 32768  # tokens per smoke request: the batch's ids stay under 300 MB
MAX_SMOKE_ROUNDS = 1000
MAX_LATENCY_MS = 3_600_000.0  # an hour: any budget beyond it is a typo
# A repository and a serving image are recorded as tags of the registered model.
MAX_REPOSITORY_CHARS = 4096
MAX_IMAGE_CHARS = 1024

# Command-line spelling of each setting, for error lines.
FLAGS = {
    "modelName": "--model-name",
    "device": "--device",
    "maxBatchSize": "--max-batch-size",
    "preferredBatchSizes": "--preferred-batch-sizes",
    "maxQueueDelayMicroseconds": "--max-queue-delay-us",
    "instanceCount": "--instances",
    "keepVersions": "--keep-versions",
    "vocabSize": "--vocab-size",
    "cpuThreads": "--cpu-threads",
    "topK": "--top-k",
    "precision": "--precision",
    "accelerator": "--accelerator",
}


class BadInput(Exception):
    """One line for the user, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        # `self.prog` names the verb too: "python -m workloads.serve config: error: ..."
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def _spec_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("serving (defaults: the stack's mlplat:inference, else built-in)")
    group.add_argument("--stack", help="read defaults and the GPU/CPU choice from stacks/Pulumi.<stack>.yaml")
    group.add_argument("--model-name", help="Triton model name (directory in the repository)")
    group.add_argument("--device", choices=DEVICES, help="instance group kind")
    # Whole numbers here; their ranges are Triton's, checked by check_serving (and the
    # vocabulary for --top-k) with the same sentence as in a stack file.
    group.add_argument("--max-batch-size", type=whole(), metavar="N")
    group.add_argument("--preferred-batch-sizes", type=whole(), nargs="+", metavar="N")
    group.add_argument("--max-queue-delay-us", type=whole(), metavar="US", help="dynamic batcher's max queue delay")
    group.add_argument("--instances", type=whole(), metavar="N", help="model instances per device")
    group.add_argument("--keep-versions", type=whole(), metavar="N", help="newest versions Triton keeps loaded")
    group.add_argument("--cpu-threads", type=whole(0, MAX_CPU_THREADS), metavar="N",
                       help="ONNX Runtime threads per instance on CPU, 0 to 1024 (default: the replica's cores per "
                            "instance)")
    group.add_argument("--top-k", type=whole(), metavar="K", help="next-token candidates each answer carries")
    group.add_argument("--precision", choices=PRECISIONS,
                       help="int8: publish a dynamically quantized graph (CPU); fp16: TensorRT's FP16 mode (GPU)")
    group.add_argument("--accelerator", choices=ACCELERATORS, help="GPU: run the graph through TensorRT")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Model export and Triton serving tools")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    export = sub.add_parser("export", help="checkpoint -> ONNX (parity-checked) -> new version in the repository")
    export.add_argument("--checkpoint", required=True,
                        help="a checkpoint directory, a root of checkpoints, models:/<name>/<version>, "
                             "models:/<name>@<alias> or runs:/<run id> (the registry's, checked against its hashes)")
    export.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI"),
                        help="the MLflow server for models:/ and runs:/ (default: $MLFLOW_TRACKING_URI)")
    export.add_argument("--serving-image", default=os.environ.get("MLPLAT_SERVING_IMAGE", ""),
                        type=printable(MAX_IMAGE_CHARS, empty=True),
                        help="the Triton image (by digest) that serves it, recorded in the registry "
                             "(default: $MLPLAT_SERVING_IMAGE)")
    export.add_argument("--repository", required=True, type=printable(MAX_REPOSITORY_CHARS),
                        help="model repository: a directory or s3://bucket/prefix")
    export.add_argument("--region", help="AWS region of the models bucket (s3:// only)")
    _spec_flags(export)

    config = sub.add_parser("config", help="print the config.pbtxt the settings produce")
    config.add_argument("--vocab-size", type=whole(1, MAX_VOCAB), required=True, metavar="N",
                        help="the model's vocabulary, 1 to 10,000,000")
    config.add_argument("--out", type=Path, help="write here instead of stdout")
    _spec_flags(config)

    check = sub.add_parser("check", help="parse and check a config.pbtxt as Triton would")
    check.add_argument("path", type=Path)

    rollback = sub.add_parser("rollback", help="remove the newest version so the one before it is served")
    rollback.add_argument("--repository", required=True, type=printable(MAX_REPOSITORY_CHARS))
    rollback.add_argument("--model-name", required=True)
    rollback.add_argument("--region")
    rollback.add_argument("--stack", help="refuse to retire the version this stack serves (mlplat:inference.version)")

    canary = sub.add_parser("canary", help="make a published version the stack's served version (rolled out as a "
                                           "canary by the next deploy)")
    canary.add_argument("--stack", required=True, help="the environment's stack (stacks/Pulumi.<stack>.yaml)")
    canary.add_argument("--repository", required=True, type=printable(MAX_REPOSITORY_CHARS),
                        help="the model repository: a directory or s3://bucket/prefix")
    canary.add_argument("--version", type=whole(1, INT64_MAX), required=True, metavar="N")
    canary.add_argument("--region", help="AWS region of the models bucket (s3:// only)")

    smoke = sub.add_parser("smoke", help="send a batch to a deployed model; check shape and latency")
    smoke.add_argument("--url", required=True, help="Triton gRPC address, host:port")
    smoke.add_argument("--model-name", required=True)
    smoke.add_argument("--model-version", default="", type=printable(32, empty=True),
                       help="default: the newest served")
    smoke.add_argument("--batch-size", type=whole(1, MAX_SMOKE_BATCH), default=4, metavar="N",
                       help="requests in the batch, 1 to 1024")
    smoke.add_argument("--sequence", type=whole(1, MAX_SMOKE_TOKENS), default=16, metavar="N",
                       help="tokens per request, 1 to 32768")
    smoke.add_argument("--rounds", type=whole(1, MAX_SMOKE_ROUNDS), default=5, metavar="N", help="1 to 1000")
    smoke.add_argument("--max-latency-ms", type=real(0, MAX_LATENCY_MS, above_low=True), default=1000.0,
                       metavar="MS", help="budget for the median round, above 0 and at most an hour")
    smoke.add_argument("--ssl", action="store_true", help="TLS, as through the internal load balancer")
    smoke.add_argument("--root-certificates", help="CA bundle for a private certificate authority")
    smoke.add_argument("--token-file", type=Path,
                       help="a JWT of the identity provider, sent as `authorization: Bearer`: the gateway refuses "
                            "requests without one")
    return parser


def _stack_serving(stack: str) -> tuple[dict[str, Any], bool, str]:
    """(defaults from the stack's mlplat:inference, whether GPU serving is possible there,
    why not)."""
    try:
        from infra.config import ConfigError, load_stack
    except ImportError:  # the serving image carries workloads/ only
        raise BadInput(f"--stack {stack}: needs the repository's infra package; run from a checkout or pass the "
                       "settings as flags") from None
    try:
        config = load_stack(stack)
    except ConfigError as err:
        raise BadInput(str(err)) from None
    refusal = gpu_refusal(config.environment, [pool.role for pool in config.node_pools])
    inference = getattr(config, "inference", None)
    defaults: dict[str, Any] = {}
    if inference is not None:
        defaults = {
            "name": inference.model_name,
            "device": inference.device,
            "max_batch_size": inference.max_batch_size,
            "preferred_batch_sizes": tuple(inference.preferred_batch_sizes),
            "max_queue_delay_microseconds": inference.max_queue_delay_microseconds,
            "instance_count": inference.instance_count,
            "keep_versions": inference.keep_versions,
            "pinned": inference.version,
            "top_k": inference.top_k,
            "precision": inference.precision,
            "accelerator": inference.accelerator,
            # A CPU replica's instances share its cores.
            "intra_op_threads": max(1, inference.cpu_per_replica // inference.instance_count),
        }
    return defaults, not refusal, refusal


def _build_spec(args: argparse.Namespace, vocab_size: int, max_sequence: int = -1) -> ModelSpec:
    defaults: dict[str, Any] = {}
    gpu_allowed, refusal = True, ""
    if args.stack:
        defaults, gpu_allowed, refusal = _stack_serving(args.stack)
    given = {
        "name": args.model_name,
        "device": args.device,
        "max_batch_size": args.max_batch_size,
        "preferred_batch_sizes": tuple(args.preferred_batch_sizes) if args.preferred_batch_sizes else None,
        "max_queue_delay_microseconds": args.max_queue_delay_us,
        "instance_count": args.instances,
        "keep_versions": args.keep_versions,
        "top_k": args.top_k,
        "precision": args.precision,
        "accelerator": args.accelerator,
    }
    defaults.pop("pinned", None)  # not a setting of the model's config
    values = {**defaults, **{k: v for k, v in given.items() if v is not None}}
    if "name" not in values:
        # A stack without mlplat:inference serves no model (dev, staging), so it has no model
        # name to default to; `gpt` is the default of mlplat:inference.modelName only.
        where = (f"--stack {args.stack} serves no model (no mlplat:inference)" if args.stack
                 else "no --stack to take mlplat:inference.modelName from")
        raise BadInput(f"--model-name is required: {where}; pass --model-name NAME, or --stack of a stack that "
                       "serves a model (prod, smb)")
    fallback = ModelSpec.__dataclass_fields__
    full = {k: values.get(k, fallback[k].default) for k in given}
    # Thread count matters on CPU only; on GPU ONNX Runtime's default stays.
    threads = args.cpu_threads if args.cpu_threads is not None else defaults.get("intra_op_threads", 0)
    full["intra_op_threads"] = threads if full["device"] == "cpu" else 0
    try:
        check_serving(
            model_name=full["name"],
            device=full["device"],
            max_batch_size=full["max_batch_size"],
            preferred_batch_sizes=full["preferred_batch_sizes"],
            max_queue_delay_microseconds=full["max_queue_delay_microseconds"],
            instance_count=full["instance_count"],
            keep_versions=full["keep_versions"],
            gpu_allowed=gpu_allowed,
            gpu_refusal=refusal,
        )
        return ModelSpec(vocab_size=vocab_size, max_sequence=max_sequence, **full)
    except ServeSpecError as err:
        raise BadInput(f"{FLAGS.get(err.key, err.key)}: {err}") from None


def _load_checkpoint(path: Path) -> tuple[Any, Any]:
    """The checkpoint's model and its config; anything wrong with the files is bad input.
    torch.distributed.checkpoint reports a damaged shard as CheckpointException, which is
    not an Exception subclass."""
    from torch.distributed.checkpoint.api import CheckpointException

    from workloads.train.checkpoint import load_for_inference

    try:
        return load_for_inference(path)
    except (Exception, CheckpointException) as err:  # noqa: BLE001 - a user's files, any failure
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise BadInput(f"--checkpoint {path}: cannot be loaded: {first}") from None


def _registered_checkpoint(args: argparse.Namespace, into: Path) -> tuple[Path, Any]:
    """A models:/ or runs:/ checkpoint, fetched from the checkpoints bucket with every hash
    checked; and the registry reference (None for runs:/)."""
    from workloads.tracking.client import TrackingError, check_server
    from workloads.tracking.registry import RegistryError, resolve
    from workloads.tracking.store import StoreError, download

    if not args.tracking_uri:
        raise BadInput(f"--checkpoint {args.checkpoint}: needs the registry: pass --tracking-uri or set "
                       "MLFLOW_TRACKING_URI")
    try:
        check_server(args.tracking_uri)
        ref = resolve(args.checkpoint, args.tracking_uri)
        path = download(ref.manifest_uri, into, expect_sha256=ref.manifest_sha256 or None)
    except (TrackingError, RegistryError, StoreError) as err:
        raise BadInput(f"--checkpoint {args.checkpoint}: {err}") from None
    return path, ref if ref.model else None


def _export(args: argparse.Namespace) -> int:
    # Settings are checked before the (slow) model load, so a typo fails at once; the
    # vocabulary (which bounds --top-k) is known only then.
    _build_spec(args, vocab_size=MAX_VOCAB)
    with tempfile.TemporaryDirectory() as fetched:
        ref = None
        checkpoint = Path(args.checkpoint)
        if args.checkpoint.startswith(("models:/", "runs:/")):
            checkpoint, ref = _registered_checkpoint(args, Path(fetched))
        return _export_checkpoint(args, checkpoint, ref)


def _record_export(args: argparse.Namespace, ref: Any, model: str, version: int, repository: str) -> None:
    """Tag the registered version with the Triton version it was published as."""
    from workloads.tracking.registry import record_export

    record_export(args.tracking_uri, ref.model, ref.version, triton_model=model, triton_version=version,
                  repository=repository, serving_image=args.serving_image)


def _export_checkpoint(args: argparse.Namespace, checkpoint: Path, ref: Any) -> int:
    from workloads.serve.export import ParityError, export_checked
    from workloads.serve.repository import (
        StoreError,
        layout,
        open_store,
        publish,
        published_config,
        published_from,
        stage_version,
    )
    from workloads.serve.triton_config import MODEL_FILENAME, round_trip, signature_change

    model, model_config = _load_checkpoint(checkpoint)
    spec = _build_spec(args, vocab_size=model_config.vocab_size, max_sequence=model_config.block_size)
    config_text = round_trip(spec)
    # What this export makes: the registered version at this precision (an int8 export of the
    # same version is another artifact).
    source = f"models:/{ref.model}/{ref.version} {spec.precision}" if ref is not None else ""
    try:
        store = open_store(args.repository, region=args.region)
        now = layout(store, spec.name)
        version = now.issued + 1
        published = published_config(store, spec.name, now)
        # An export of this registered version that died after publishing and before
        # recording: record that version, publish none again.
        done = published_from(store, spec.name, source, now) if source else None
    except StoreError as err:
        raise BadInput(f"--repository: {err}") from None
    if done is not None:
        _record_export(args, ref, spec.name, done, store.describe())
        print(f"{source} was published as {spec.name} version {done} in {store.describe()}; recorded it, "
              "published nothing again")
        return EXIT_OK
    if published is not None:
        try:
            change = signature_change(published, config_text, f"{store.describe()}/{spec.name}/config.pbtxt")
        except ServeSpecError as err:
            raise BadInput(f"--repository: {err}") from None
        if change:
            raise BadInput(f"--model-name {spec.name}: {change}; Triton has one config for all versions of a "
                           "model, so publish this checkpoint under a new --model-name")
    with tempfile.TemporaryDirectory() as staging:
        try:
            result = export_checked(model, Path(staging) / "export" / MODEL_FILENAME,
                                    vocab_size=model_config.vocab_size, max_sequence=model_config.block_size,
                                    top_k=spec.top_k, precision="int8" if spec.precision == "int8" else "fp32")
        except ParityError as err:
            print(f"{PROG}: parity check failed: {err}", file=sys.stderr)
            return EXIT_FAILED
        model_dir = stage_version(Path(staging) / "repo", spec.name, version, config_text, result.files, source)
        try:
            retired = publish(store, model_dir, version, keep=spec.keep_versions, protect=_pinned(args.stack))
        except StoreError as err:
            raise BadInput(f"--repository: {err}") from None
    if ref is not None:
        _record_export(args, ref, spec.name, version, store.describe())
    quantized = result.agreement
    checked = f"ONNX Runtime vs PyTorch max |diff| {result.max_abs_diff:.2e}" + (
        f"; int8 vs fp32: top-1 agreement {quantized.top1:.1%}, top-{spec.top_k} overlap "
        f"{quantized.top_k_overlap:.1%} over {quantized.requests} requests" if quantized else "")
    print(f"published {spec.name} version {version} ({spec.precision}) to {store.describe()} ({checked}; Triton "
          f"serves the newest {spec.keep_versions})" + (f"; retired version(s) {', '.join(map(str, retired))}"
                                                         if retired else ""))
    return EXIT_OK


def _config(args: argparse.Namespace) -> int:
    from workloads.serve.triton_config import round_trip

    text = round_trip(_build_spec(args, vocab_size=args.vocab_size))
    if args.out:
        try:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            # A FIFO would block the write forever, a device swallow it: a regular file only.
            inputs.check_output(args.out, "model config")
            args.out.write_text(text)
        except inputs.InputError as err:
            raise BadInput(f"--out {err}") from None
        except OSError as err:
            raise BadInput(f"--out {args.out}: cannot be written: {err.strerror or err}: {err.filename}") from None
    else:
        sys.stdout.write(text)
    return EXIT_OK


def _check(args: argparse.Namespace) -> int:
    from workloads.serve.triton_config import check_model_config, parse

    try:
        text = inputs.read_bytes(args.path, "model config (config.pbtxt)", CONFIG_LIMIT).decode("utf-8")
    except inputs.InputError as err:
        raise BadInput(str(err)) from None
    except UnicodeDecodeError:
        raise BadInput(f"{args.path}: not a text file (config.pbtxt is UTF-8 protobuf text)") from None
    try:
        config = parse(text, str(args.path))
        check_model_config(config, directory=args.path.resolve().parent.name)
    except ServeSpecError as err:
        message = str(err)
        raise BadInput(message if message.startswith(str(args.path)) else f"{args.path}: {message}") from None
    print(f"{args.path}: ok ({config.name}, max batch {config.max_batch_size})")
    return EXIT_OK


def _pinned(stack: str | None) -> frozenset[int]:
    """The version `stack` serves, which no export or rollback may retire."""
    if not stack:
        return frozenset()
    defaults, _, _ = _stack_serving(stack)
    return frozenset({defaults["pinned"]}) if defaults.get("pinned") else frozenset()


def _rollback(args: argparse.Namespace) -> int:
    from workloads.serve.repository import StoreError, open_store, rollback
    from workloads.serve.spec import MODEL_NAME_PATTERN, model_name_problem

    if not MODEL_NAME_PATTERN.fullmatch(args.model_name):
        raise BadInput(f"--model-name: {model_name_problem(args.model_name)}")
    try:
        store = open_store(args.repository, region=args.region)
        removed, current = rollback(store, args.model_name, protect=_pinned(args.stack))
    except StoreError as err:
        raise BadInput(f"--repository: {err}") from None
    print(f"retired {args.model_name} version {removed} (kept as retired-{removed}); version {current} is now the "
          "newest. Each pod copies the repository when it starts (--model-control-mode=none): restart the pods "
          "(kubectl argo rollouts -n inference restart triton) to serve it")
    return EXIT_OK


def _canary(args: argparse.Namespace) -> int:
    from workloads.serve.canary import CanaryError, set_version
    from workloads.serve.repository import StoreError, open_store, versions

    try:
        from infra.config import ConfigError, load_stack
    except ImportError:  # the serving image carries workloads/ only
        raise BadInput("--stack: needs the repository's infra package; run from a checkout") from None
    try:
        settings = load_stack(args.stack).inference
    except ConfigError as err:
        raise BadInput(str(err)) from None
    if settings is None:
        raise BadInput(f"--stack {args.stack}: it serves no model (no mlplat:inference section)")
    try:
        published = versions(open_store(args.repository, region=args.region), settings.model_name)
        change = set_version(args.stack, args.version, published)
    except StoreError as err:
        raise BadInput(f"--repository: {err}") from None
    except CanaryError as err:
        raise BadInput(str(err)) from None
    how = "as an A/B split" if change.strategy == "ab" else "as a canary"
    print(f"{change.path.name}: mlplat:inference.version {change.before or 'unset'} -> {change.after}. The next "
          f"deploy of both layers rolls {change.model} version {change.after} out {how}; watch it with `kubectl argo "
          "rollouts -n inference get rollout triton`, end it early with `promote` or `abort`")
    return EXIT_OK


def _smoke(args: argparse.Namespace) -> int:
    from workloads.serve.client import connect, smoke_test

    if args.root_certificates:
        _check_ca_bundle(Path(args.root_certificates))
    headers = {}
    if args.token_file:
        headers["authorization"] = f"Bearer {_read_token(args.token_file)}"
    client = connect(args.url, ssl=args.ssl, root_certificates=args.root_certificates)
    try:
        result = smoke_test(client, args.model_name, batch_size=args.batch_size, sequence=args.sequence,
                            rounds=args.rounds, max_latency_ms=args.max_latency_ms, version=args.model_version,
                            headers=headers)
    finally:
        client.close()
    print(result.summary())
    return EXIT_OK if result.ok else EXIT_FAILED


def _check_ca_bundle(path: Path) -> None:
    """The CA bundle gRPC will read: read here first, bounded, so a FIFO or a device is one
    line rather than a hang in the client."""
    if not os.path.lexists(path):
        raise BadInput(f"--root-certificates {path}: no such file")
    try:
        inputs.read_bytes(path, "CA bundle", CA_LIMIT)
    except inputs.InputError as err:
        raise BadInput(f"--root-certificates {err}") from None


def _read_token(path: Path) -> str:
    """The JWT in --token-file: ASCII, three dot-separated parts, no spaces."""
    try:
        token = inputs.read_bytes(path, "token file", TOKEN_LIMIT).decode("ascii").strip()
    except inputs.InputError as err:
        raise BadInput(f"--token-file {err}") from None
    except UnicodeDecodeError:
        raise BadInput(f"--token-file {path}: cannot be read: not a text token") from None
    # A gRPC header value: printable ASCII without spaces (an escape would be refused there).
    if token.count(".") != 2 or any(c.isspace() or not c.isprintable() for c in token):
        raise BadInput(f"--token-file {path}: does not hold a JWT (three dot-separated parts)")
    return token


COMMANDS = {"export": _export, "config": _config, "check": _check, "rollback": _rollback, "canary": _canary,
            "smoke": _smoke}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except BadInput as err:
        print(f"{PROG} {args.command}: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
