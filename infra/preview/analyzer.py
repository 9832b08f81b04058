"""Talk to the real policy pack the way the Pulumi CLI does.

The pack is started as `python -m pulumi.policy <engine> <pack-dir>`; it prints its port
on the first line of stdout and serves `pulumirpc.Analyzer`. Resources are sent to
`Analyze` as they register, so the pack works while the program still runs, then all of
them to `AnalyzeStack`; those calls go through a relay process (infra/preview/relay.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc

from infra.config import REPO_ROOT, ConfigError
from infra.preview.mocks import Registration
from infra.preview.relay import CHANNEL_OPTIONS, FrameWriter, last_line, read_frame
from workloads import inputs

PACK_DIR = REPO_ROOT / "policies"
POLICY_CONFIG_LIMIT = 1 << 20  # the prod config is a few kilobytes
# Stack policies name the resource types they judge as `scope:<type>` tags, so evidence
# can be counted per resource for them too.
SCOPE_TAG = "scope:"

LEVELS = {
    "advisory": analyzer_pb2.ADVISORY,
    "mandatory": analyzer_pb2.MANDATORY,
    "disabled": analyzer_pb2.DISABLED,
    "remediate": analyzer_pb2.REMEDIATE,
}
LEVEL_NAMES = {v: k for k, v in LEVELS.items()}


class PackError(Exception):
    """The policy pack could not be started or answered with an error."""


@dataclass(frozen=True)
class Violation:
    policy: str
    level: str
    urn: str
    message: str


@dataclass(frozen=True)
class PolicyDescription:
    name: str
    description: str
    level: str
    framework: dict[str, str]
    config_schema: dict[str, Any]
    stack_policy: bool
    # Types a stack policy judges, from its `scope:<type>` tags; empty means every resource.
    scope: frozenset[str] = frozenset()


@dataclass
class Verdict:
    policies: list[PolicyDescription]
    violations: list[Violation] = field(default_factory=list)
    advisories: list[str] = field(default_factory=list)  # e.g. "can't run during preview"
    # Evidence: per policy, the resources it judged (not "not applicable") and those failed.
    checked: dict[str, set[str]] = field(default_factory=dict)
    failed: dict[str, set[str]] = field(default_factory=dict)

    @property
    def mandatory(self) -> list[Violation]:
        return [v for v in self.violations if v.level == "mandatory"]


def load_policy_config(path: Path | None) -> dict[str, Any]:
    """A `--policy-pack-config` file, as the CLI reads it. A path that names nothing is
    refused, never taken as an empty config (every rule would run at its defaults, and a
    misspelt path would pass unnoticed)."""
    if path is None:
        return {}
    if not path.exists() and not path.is_symlink():
        raise ConfigError(f"{path}: no such policy pack config; name the file (default policies/config/<env>.json)")
    try:
        data = inputs.read_json(path, "policy pack config", POLICY_CONFIG_LIMIT)
    except inputs.InputError as err:
        raise ConfigError(str(err)) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object of policy names")
    return data


class PolicyPackProcess:
    """A running policy pack and a client for it."""

    def __init__(self, pack_dir: Path = PACK_DIR) -> None:
        self.pack_dir = pack_dir
        env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_")}
        # The engine address is only used by the pack for logging, which we do not need.
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "pulumi.policy", "127.0.0.1:0", str(pack_dir)],
            cwd=pack_dir,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.port = ""  # where the pack serves, once it has started
        self._channel: grpc.Channel | None = None
        self._stub: analyzer_pb2_grpc.AnalyzerStub | None = None
        self._ready = threading.Event()
        self._start_error: str | None = None
        threading.Thread(target=self._connect, daemon=True).start()

    def _connect(self) -> None:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().decode().strip()
        if not line.isdigit():
            stderr = self._proc.stderr.read().decode() if self._proc.stderr else ""
            self._start_error = f"policy pack in {self.pack_dir} did not start: {last_line(stderr)}"
        else:
            self.port = line
            self._channel = grpc.insecure_channel(f"127.0.0.1:{line}", options=CHANNEL_OPTIONS)
            self._stub = analyzer_pb2_grpc.AnalyzerStub(self._channel)
        self._ready.set()

    @property
    def stub(self) -> analyzer_pb2_grpc.AnalyzerStub:
        self._ready.wait(timeout=60)
        if self._stub is None:
            raise PackError(self._start_error or "policy pack did not start within 60 s")
        return self._stub

    def info(self) -> list[PolicyDescription]:
        answer = self.stub.GetAnalyzerInfo(empty_pb2.Empty())
        return [
            PolicyDescription(
                name=p.name,
                description=p.description,
                level=LEVEL_NAMES.get(p.enforcementLevel, "advisory"),
                framework=json_format.MessageToDict(p.framework),
                config_schema=json_format.MessageToDict(p.configSchema),
                stack_policy=p.policy_type == analyzer_pb2.POLICY_TYPE_STACK,
                scope=frozenset(t[len(SCOPE_TAG):] for t in p.tags if t.startswith(SCOPE_TAG)),
            )
            for p in answer.policies
        ]

    def configure(self, policies: list[PolicyDescription], config: Mapping[str, Any], source: str) -> None:
        """Apply a policy config file, filling schema defaults first as the CLI does."""
        known = {p.name: p for p in policies}
        for name in config:
            if name != "all" and name not in known:
                raise ConfigError(f"{source}: {name}: no such policy; policies: {', '.join(sorted(known))}")
        default_level = _level(config.get("all"), source, "all")
        request = analyzer_pb2.ConfigureAnalyzerRequest()
        for policy in policies:
            entry = config.get(policy.name, {})
            if isinstance(entry, str):
                entry = {"enforcementLevel": entry}
            properties = {
                key: spec["default"]
                for key, spec in policy.config_schema.get("properties", {}).items()
                if "default" in spec
            }
            for key, value in entry.items():
                if key == "enforcementLevel":
                    continue
                if key not in policy.config_schema.get("properties", {}):
                    raise ConfigError(f"{source}: {policy.name}.{key}: unknown setting; settings: "
                                      f"{', '.join(sorted(policy.config_schema.get('properties', {}))) or 'none'}")
                properties[key] = value
            level = _level(entry.get("enforcementLevel"), source, policy.name) or default_level or policy.level
            struct = struct_pb2.Struct()
            struct.update(properties)
            request.policyConfig[policy.name].CopyFrom(
                analyzer_pb2.PolicyConfig(enforcementLevel=LEVELS[level], properties=struct)
            )
        self.stub.Configure(request)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._proc.kill()
        self._proc.wait()
        for stream in (self._proc.stdout, self._proc.stderr):
            if stream is not None:
                stream.close()


def _level(value: Any, source: str, where: str) -> str | None:
    if value is None:
        return None
    if value not in LEVELS:
        raise ConfigError(f"{source}: {where}: enforcement level {value!r} is not one of {', '.join(LEVELS)}")
    return value


class StreamingAnalysis:
    """Sends each registered resource to `Analyze` as soon as it exists.

    The gRPC calls are made by a relay process (infra/preview/relay.py), so they cost the
    program's process only the serialized bytes. The thread that registers a resource
    serializes it and queues the frames; a writer thread (relay.FrameWriter) configures the
    pack (which waits for it to start), hands the relay the pack's port, then writes the
    queue to the relay. A reader thread takes the answers as the relay forwards them, so
    they are decoded while the pack works on the rest.
    """

    def __init__(self, pack: PolicyPackProcess, providers: Mapping[str, Registration],
                 configure: Callable[[], list[PolicyDescription]]) -> None:
        self.pack = pack
        self.providers = providers  # urn -> provider registration, filled as they register
        self.policies: list[PolicyDescription] = []
        self._configure = configure
        self._error: BaseException | None = None
        self._sent: list[Registration] = []  # in the order the relay answers
        self._lock = threading.Lock()
        self._relay_stderr = tempfile.TemporaryFile()
        self._relay = subprocess.Popen([sys.executable, "-m", "infra.preview.relay"], cwd=REPO_ROOT,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       # A file, not a pipe: unread, a pipe would fill and stall the relay.
                                       stderr=self._relay_stderr)
        assert self._relay.stdin is not None
        self._writer = FrameWriter(self._relay.stdin, self._configure_then_connect)
        # What the relay says, read as it says it (answers arrive while the pack works on the
        # rest, and are decoded here meanwhile): W, then R per resource, then S or E.
        self._started = threading.Event()
        self._answers: list[Any] = []
        self._stack_answer: Any = None
        self._relay_error: str | None = None
        self._reader = threading.Thread(target=self._read_relay, daemon=True)
        self._reader.start()

    def submit(self, reg: Registration) -> None:
        request = reg.urn.encode() + b"\n" + self._analyze_request(reg).SerializeToString()
        extras = self._stack_fields(reg).SerializeToString()
        with self._lock:  # a request and its stack fields, together and in answer order
            self._writer.put(b"A", request)
            self._writer.put(b"X", extras)
            self._sent.append(reg)

    def _configure_then_connect(self) -> list[tuple[bytes, bytes]]:
        self.policies = self._configure()
        return [(b"P", self.pack.port.encode())]

    def _provider(self, reg: Registration) -> analyzer_pb2.AnalyzerProviderResource | None:
        provider = self.providers.get(reg.provider_urn)
        if provider is None:
            return None
        return analyzer_pb2.AnalyzerProviderResource(
            type=provider.type, properties=provider.properties, urn=provider.urn, name=provider.name
        )

    @staticmethod
    def _options(reg: Registration) -> analyzer_pb2.AnalyzerResourceOptions:
        return analyzer_pb2.AnalyzerResourceOptions(
            protect=reg.protect,
            ignoreChanges=reg.ignore_changes,
            deleteBeforeReplace=reg.delete_before_replace,
            additionalSecretOutputs=reg.additional_secret_outputs,
            parent=reg.parent,
        )

    def _analyze_request(self, reg: Registration) -> analyzer_pb2.AnalyzeRequest:
        request = analyzer_pb2.AnalyzeRequest(
            type=reg.type, properties=reg.properties, urn=reg.urn, name=reg.name, options=self._options(reg)
        )
        provider = self._provider(reg)
        if provider is not None:
            request.provider.CopyFrom(provider)
        return request

    @staticmethod
    def _stack_fields(reg: Registration) -> analyzer_pb2.AnalyzerResource:
        """What AnalyzeStack's resource adds to the resource's Analyze request."""
        resource = analyzer_pb2.AnalyzerResource(parent=reg.parent, dependencies=reg.dependencies)
        for key, urns in reg.property_dependencies.items():
            resource.propertyDependencies[key].urns.extend(urns)
        return resource

    def _read_relay(self) -> None:
        assert self._relay.stdout is not None
        try:
            while (frame := read_frame(self._relay.stdout)) is not None:
                tag, payload = frame
                if tag == b"W":
                    self._started.set()
                elif tag == b"R":
                    self._answers.append(analyzer_pb2.AnalyzeResponse.FromString(payload))
                elif tag == b"S":
                    self._stack_answer = analyzer_pb2.AnalyzeResponse.FromString(payload)
                    return
                else:
                    self._relay_error = payload.decode(errors="replace")
                    return
        except (OSError, ValueError):  # the stream closed under us (close())
            return
        finally:
            self._started.set()  # whatever happened, no one waits for it

    def ready(self) -> None:
        """Wait until the relay can send (gRPC loaded): its start-up, which a preview spends
        while the program runs, and a benchmark times apart from the check."""
        self._started.wait()
        if not self._reader.is_alive() and self._stack_answer is None and self._relay_error is None:
            raise PackError("the policy relay did not start")

    def finish(self, registrations: Iterable[Registration]) -> Verdict:
        registrations = list(registrations)
        self._writer.put(b"F", "\n".join(dict.fromkeys(r.urn for r in registrations)).encode())
        self._writer.close()
        self._writer.started.wait()
        self._error = self._error or self._writer.error
        answers = None
        if self._error is None or isinstance(self._error, OSError):  # a broken pipe: the relay says why
            answers = self._relay_answers()
        self._writer.join()
        if self._error is not None or answers is None:
            raise self._error or PackError("the policy relay gave no answer")
        policies = self.policies
        verdict = Verdict(policies=policies)
        responses, stack_answer = answers
        resource_policies = [p.name for p in policies if not p.stack_policy]
        for reg, answer in zip(self._sent, responses):
            self._collect(verdict, reg.urn, answer, resource_policies)
        stack_policies = [p.name for p in policies if p.stack_policy]
        stack_urns: dict[str, list[str]] = {}
        for policy in policies:
            if policy.stack_policy:
                # A stack policy judges the resources of the types it declares (all of
                # them if it declares none), unless it declared itself inapplicable.
                verdict.checked.setdefault(policy.name, set())
                stack_urns[policy.name] = [r.urn for r in registrations if not policy.scope or r.type in policy.scope]
        self._collect(verdict, "", stack_answer, stack_policies, stack_urns=stack_urns)
        return verdict

    def _relay_answers(self) -> tuple[list[Any], Any] | None:
        """Every Analyze answer, in the order sent, and the AnalyzeStack answer (decoded)."""
        self._reader.join()
        if self._stack_answer is not None:
            return self._answers, self._stack_answer
        if self._relay_error is not None:
            self._error = PackError(self._relay_error)
            return None
        self._relay.wait()
        self._relay_stderr.seek(0)
        stderr = self._relay_stderr.read().decode(errors="replace")
        self._error = PackError(f"the policy relay exited: {last_line(stderr)}")
        return None

    def close(self) -> None:
        self._relay.kill()
        self._relay.wait()
        self._reader.join(timeout=10)  # the relay's end closes its stream: the reader stops
        self._writer.close()  # ends the writer, if finish() never ran
        self._writer.join()
        for stream in (self._relay.stdout, self._relay_stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:  # frames still buffered for a relay that is gone: nothing to deliver
                    pass

    @staticmethod
    def _collect(verdict: Verdict, urn: str, answer: Any, names: list[str],
                 stack_urns: dict[str, list[str]] | None = None) -> None:
        not_applicable = {n.policy_name for n in answer.not_applicable}
        for name in names:
            if name not in not_applicable:
                verdict.checked.setdefault(name, set()).update(stack_urns[name] if stack_urns is not None else [urn])
        for diag in answer.diagnostics:
            level = LEVEL_NAMES.get(diag.enforcementLevel, "advisory")
            target = diag.urn or urn
            if diag.message.startswith("can't run policy"):
                verdict.advisories.append(diag.message)
                continue
            verdict.violations.append(Violation(diag.policyName, level, target, diag.message))
            verdict.failed.setdefault(diag.policyName, set()).add(target)
