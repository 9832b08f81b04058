"""Decode each resource's properties once per request instead of once per rule.

pulumi-policy's analyzer turns a resource's property Struct into a dict, that dict into
Python values, and those into a read-only proxy that refuses values unknown at preview,
separately for every rule it runs (and again for the provider's properties): with 28
rules that work is most of the pack's time. The rules never modify what they read, so the
pack process shares one decoded copy, and one proxy of it, among them.

Results are kept per message object (the messages of one request keep their identity),
holding a reference to each message so its id cannot be reused while it is cached.

Decoding is also deferred until a rule reads the properties: most rules decide from the
resource type alone that they do not judge it, and some resources (a CRD's schema runs to
megabytes) no rule ever reads.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

# Enough for every resource of a large stack's AnalyzeStack request.
_LIMIT = 50_000


class _IdentityCache:
    """The analyzer serves requests on several threads. A lookup is one `dict.get`, atomic
    under the GIL (most calls are hits: 29 rules read each resource); adding an entry
    takes the lock."""

    def __init__(self) -> None:
        self._entries: dict[tuple[int, Any], tuple[Any, Any]] = {}
        self._lock = threading.Lock()

    def get(self, key_obj: Any, extra: Any, compute: Any) -> Any:
        key = (id(key_obj), extra)
        hit = self._entries.get(key)
        if hit is not None and hit[0] is key_obj:
            return hit[1]
        value = compute()
        with self._lock:
            self._entries[key] = (key_obj, value)
            if len(self._entries) > _LIMIT:  # the oldest first: dicts keep insertion order
                del self._entries[next(iter(self._entries))]
        return value


class _Deferred:
    """Deserialized properties, worked out the first time they are needed. `source` is the
    Struct they come from, for a rule that searches the properties' text as a whole."""

    __slots__ = ("_compute", "_value", "_lock", "source")

    def __init__(self, compute: Callable[[], Any], source: Any = None) -> None:
        self._compute: Callable[[], Any] | None = compute
        self._value: Any = None
        self._lock = threading.Lock()
        self.source = source

    def value(self) -> Any:
        with self._lock:
            if self._compute is not None:
                self._value, self._compute = self._compute(), None
            return self._value


_UNKNOWNS: frozenset[str] = frozenset()  # the engine's sentinels, filled from pulumi-policy on first use


def _unknowns() -> frozenset[str]:
    global _UNKNOWNS
    if not _UNKNOWNS:
        from pulumi_policy import proxy

        _UNKNOWNS = frozenset(getattr(proxy, name) for name in dir(proxy)
                              if name.startswith("UNKNOWN_") and name.endswith("_VALUE"))
    return _UNKNOWNS


def _checked(value: Any, path: tuple[str, ...], key: Any) -> Any:
    """A value read from decoded properties, as the SDK's unknown-checking proxy gives it:
    an unknown sentinel raises UnknownValueError naming its path; a mapping or list comes
    wrapped so that what is read from it is checked too. Only what a rule reads is wrapped."""
    if isinstance(value, str):
        if value in _unknowns():
            from pulumi_policy.proxy import UnknownValueError

            raise UnknownValueError(value, [*path, str(key)])
        return value
    if isinstance(value, dict):
        return _CheckedMapping(value, (*path, str(key)))
    if isinstance(value, list):
        return _CheckedSequence(value, (*path, str(key)))
    return value


class _CheckedMapping(Mapping):
    """The SDK's unknown-checking proxy of a dict, built as it is read rather than whole:
    pulumi-policy's proxy wraps every value of a resource before a rule reads one."""

    __slots__ = ("_target", "_path")

    def __init__(self, target: dict[str, Any], path: tuple[str, ...]) -> None:
        self._target, self._path = target, path

    def __getitem__(self, key: Any) -> Any:
        return _checked(self._target[key], self._path, key)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._target)

    def __len__(self) -> int:
        return len(self._target)


class _CheckedSequence(Sequence):
    __slots__ = ("_target", "_path")

    def __init__(self, target: list[Any], path: tuple[str, ...]) -> None:
        self._target, self._path = target, path

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(len(self._target))[index]]
        return _checked(self._target[index], self._path, index)

    def __len__(self) -> int:
        return len(self._target)


def checked_proxy(props: Any) -> Any:
    """Decoded properties behind the SDK proxy's contract (read-only, unknown values raise)."""
    return _CheckedMapping(props, ()) if isinstance(props, dict) else props


class _LazyProxy(Mapping):
    """The read-only proxy of deferred properties: a Mapping, like the SDK's own proxy,
    that builds that proxy on first access."""

    def __init__(self, make: Callable[[], Any], decoded: _Deferred | None = None) -> None:
        self._deferred = _Deferred(make)
        self._decoded = decoded
        self._bytes: bytes | None = None

    def plain(self) -> Any:
        """The decoded properties themselves (unknown values as the engine's sentinels)."""
        return self._decoded.value() if self._decoded is not None else None

    def serialized(self) -> bytes | None:
        """The properties' Struct as protobuf bytes, every string in it verbatim (None when
        the Struct is not at hand); serialized once, for the several rules that search it."""
        if self._bytes is None:
            source = self._decoded.source if self._decoded is not None else None
            self._bytes = source.SerializeToString() if source is not None else None
        return self._bytes

    def __getitem__(self, key: Any) -> Any:
        return self._deferred.value()[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._deferred.value())

    def __len__(self) -> int:
        return len(self._deferred.value())


# The analyzer's methods whose `MessageToDict(properties)` goes straight into
# `deserialize_properties` (Configure keeps its dict as the policies' config).
_DECODED_LATER = frozenset({"Analyze", "AnalyzeStack", "Remediate", "_get_provider_resource",
                            "shared_properties"})  # the last: share_request_work_across_rules' analyzer


def _value(props: Any) -> Any:
    return props.value() if isinstance(props, _Deferred) else props


def struct_to_dict(struct: Any) -> dict[str, Any]:
    """A google.protobuf.Struct as `json_format.MessageToDict` gives it, several times faster:
    MessageToDict walks every Value through the generic message machinery, which for a chart's
    large objects is most of the pack's time. tests/policy/test_decoding.py holds the two
    equal over every stack's resources."""
    return _fields_to_dict(struct.fields)


def _fields_to_dict(fields: Any) -> dict[str, Any]:
    return {key: _value_to_object(fields[key]) for key in fields}


def _value_to_object(value: Any) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return value.string_value
    if kind == "struct_value":
        return _fields_to_dict(value.struct_value.fields)
    if kind == "list_value":
        return [_value_to_object(v) for v in value.list_value.values]
    if kind == "number_value":
        number = value.number_value
        if math.isinf(number) or math.isnan(number):
            raise ValueError(f"Fail to serialize {number} for Value.number_value, which would parse as string_value")
        return number
    if kind == "bool_value":
        return value.bool_value
    return None  # null_value, or unset


def deserialized_struct(struct: Any) -> dict[str, Any]:
    """pulumi-policy's `deserialize_properties(struct_to_dict(struct))` in one walk instead of
    two: a map carrying Pulumi's signature key (a secret, an asset, an archive) is converted
    and handed to the SDK's own deserializer; every other value is what struct_to_dict gives.
    tests/policy/test_decoding.py holds the two equal over every stack's resources."""
    return {key: _deserialized_value(value) for key, value in struct.fields.items()}


def _deserialized_value(value: Any) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        fields = value.struct_value.fields
        if _SIGNATURE_KEY in fields:
            from pulumi_policy.deserialize import _deserialize_property

            return _deserialize_property(_fields_to_dict(fields))
        return {key: _deserialized_value(item) for key, item in fields.items()}
    if kind == "list_value":
        return [_deserialized_value(item) for item in value.list_value.values]
    return _value_to_object(value)


_SIGNATURE_KEY = "4dabf18193072939515e22adb298388d"  # pulumi_policy.deserialize.SPECIAL_SIG_KEY

_KNOWN = _IdentityCache()


class KnownProperties(dict):
    """Properties as `known` returns them: a copy no caller changes, so what rules work out
    from it (pod templates, images) can be kept by its identity for the other rules."""


def known(props: Any) -> Any:
    """A resource's properties as plain data with every value unknown at preview replaced by
    `unknown` (the rules' UNKNOWN), for rules that walk them: reading plain dicts and lists
    is several times faster than reading through the SDK's checking proxy, and means the
    same (the proxy's UnknownValueError is what common.get turns into UNKNOWN). The pack's
    shared copy is converted once per resource; a plain dict is copied each call (a caller
    may change it); anything else is returned as it is."""
    from .common import UNKNOWN

    if isinstance(props, KnownProperties):
        return props
    if isinstance(props, _LazyProxy) and props.plain() is not None:
        return _KNOWN.get(props, None, lambda: KnownProperties(_without_sentinels(props.plain(), _unknowns(), UNKNOWN)))
    if isinstance(props, dict):
        return KnownProperties(_without_sentinels(props, _unknowns(), UNKNOWN))
    return props


def _without_sentinels(value: Any, sentinels: frozenset[str], unknown: Any) -> Any:
    if isinstance(value, str):
        return unknown if value in sentinels else value
    if isinstance(value, dict):
        return {k: _without_sentinels(v, sentinels, unknown) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_sentinels(v, sentinels, unknown) for v in value]
    return value


def serialized(props: Any) -> bytes | None:
    """A resource's properties as the Struct's bytes, where the pack's shared copy has them:
    for a rule that only needs to know whether some text occurs anywhere in them, searching
    the bytes spares decoding (a CRD's schema runs to megabytes)."""
    return props.serialized() if isinstance(props, _LazyProxy) else None


def plain(props: Any) -> Any:
    """A resource's properties as plain data, for a rule that searches them as a whole (None
    where only the SDK's proxy is at hand): the pack's shared copy, or a plain dict."""
    if isinstance(props, _LazyProxy):
        return props.plain()
    return props if isinstance(props, dict) else None


class _JsonFormatShim:
    """What share_decoding_across_rules puts in place of pulumi-policy's json_format."""


def share_decoding_across_rules() -> None:
    """Install the shared decoding in pulumi-policy's analyzer (this process only)."""
    from google.protobuf import json_format
    from pulumi_policy import policy

    if isinstance(policy.json_format, _JsonFormatShim):
        return  # installed already: a second shim would wrap the first
    messages = _IdentityCache()
    values = _IdentityCache()
    proxies = _IdentityCache()
    to_dict = json_format.MessageToDict
    deserialize = policy.deserialize_properties
    make_proxy = policy.unknown_checking_proxy

    class _JsonFormat(_JsonFormatShim):
        """json_format as the analyzer sees it, with MessageToDict shared."""

        def __getattr__(self, name: str) -> Any:
            return getattr(json_format, name)

        @staticmethod
        def MessageToDict(message: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N802 (protobuf's name)
            if args or kwargs:
                return to_dict(message, *args, **kwargs)
            convert = struct_to_dict if message.DESCRIPTOR.full_name == "google.protobuf.Struct" else to_dict
            if sys._getframe(1).f_code.co_name in _DECODED_LATER:
                # Even turning the Struct into a dict is deferred: for a CRD that is
                # megabytes no rule reads.
                return messages.get(message, None, lambda: _Deferred(lambda: convert(message), message))
            return messages.get(message, None, lambda: convert(message))

    def deserialize_properties(props: Any, keep_unknowns: Any = None) -> Any:
        if keep_unknowns:  # remediation reads the decoded values itself: decode now
            return values.get(props, keep_unknowns, lambda: deserialize(_value(props), keep_unknowns))
        source = getattr(props, "source", None)
        if source is not None and source.DESCRIPTOR.full_name == "google.protobuf.Struct":
            return values.get(props, None, lambda: _Deferred(lambda: deserialized_struct(source), source))
        return values.get(props, keep_unknowns, lambda: _Deferred(lambda: deserialize(_value(props), keep_unknowns),
                                                                   getattr(props, "source", None)))

    def unknown_checking_proxy(props: Any) -> Any:
        # The proxies only wrap: they hold no state of their own a rule could change.
        if isinstance(props, _Deferred):
            return proxies.get(props, None, lambda: _LazyProxy(lambda: checked_proxy(props.value()), props))
        return proxies.get(props, None, lambda: make_proxy(props))

    policy.json_format = _JsonFormat()
    policy.deserialize_properties = deserialize_properties
    policy.unknown_checking_proxy = unknown_checking_proxy


# One key object per provider (URN and inputs), so the identity cache can hold it.
_PROVIDER_KEYS: dict[tuple[str, str, str, bytes], tuple[str, str, str, bytes]] = {}


def shared_properties(properties: Any) -> Any:
    """A resource's properties as every rule of a request reads them: decoded once (lazily,
    share_decoding_across_rules) and proxied once."""
    from pulumi_policy import policy as sdk

    return sdk.unknown_checking_proxy(sdk.deserialize_properties(sdk.json_format.MessageToDict(properties)))


def stack_resources(servicer: Any, requested: Any) -> list[Any]:
    """AnalyzeStack's resources as pulumi-policy builds them for each stack rule (linked to
    their parents, dependencies and property dependencies within the stack), built once."""
    from pulumi_policy import policy as sdk

    built = []
    for r in requested:
        resource = sdk.PolicyResource(r.type, shared_properties(r.properties), r.urn, r.name,
                                      servicer._get_resource_options(r), servicer._get_provider_resource(r), None, [],
                                      {})
        built.append((resource, r))
    by_urn = {resource.urn: resource for resource, _r in built}
    for resource, r in built:
        if r.parent in by_urn:
            resource.parent = by_urn[r.parent]
        resource.dependencies.extend(by_urn[d] for d in r.dependencies if d in by_urn)
        for key, urns in r.propertyDependencies.items():
            resource.property_dependencies[key] = [by_urn[u] for u in urns.urns if u in by_urn]
    return [resource for resource, _r in built]


def share_request_work_across_rules() -> None:
    """The analyzer's `Analyze` and `AnalyzeStack`, with what is the same for every rule
    worked out once, and rules that declare the types they judge skipped without building
    their arguments.

    pulumi-policy's `Analyze` builds, for every rule, the resource's options, its provider's
    properties and the rule's arguments, and calls the rule, which for most types answers
    "not applicable" at once; its `AnalyzeStack` rebuilds every resource of the stack for
    every stack rule. Here the rules to run for a resource type are planned once per
    configuration (a rule made by `resource_rule` answers `skips(type)` with the reason its
    validate would give), the options and provider are built on the first rule that reads
    them, and the stack's resources once per request. Everything a rule or the engine sees
    (arguments, violations, diagnostics, not-applicable answers, in the same order) is what
    the SDK gives: tests/policy/test_decoding.py compares both answers over every stack."""
    from pulumi.runtime.proto import analyzer_pb2 as proto
    from pulumi_policy import policy as sdk

    servicer = sdk._PolicyAnalyzerServicer
    if getattr(servicer, "_shares_request_work", False):
        return
    configure = servicer.Configure
    get_provider = servicer._get_provider_resource
    plans: dict[str, list[tuple[Any, Any, str | None]]] = {}
    providers = _IdentityCache()  # by the provider's URN and inputs: every request carries its own copy

    def provider_resource(self: Any, request: Any) -> Any:
        if not request.HasField("provider"):
            return None
        provider = request.provider
        key = (provider.urn, provider.type, provider.name, provider.properties.SerializeToString(deterministic=True))
        return providers.get(_PROVIDER_KEYS.setdefault(key, key), None, lambda: get_provider(self, request))

    def plan(self: Any, resource_type: str) -> list[tuple[Any, Any, list[Any]]]:
        """What to answer for a resource of this type, rule by rule, in the rules' order: each
        step is (rule, level) to run, or (None, None, [answers]) for a run of rules that do not
        judge the type, their not-applicable answers built once."""
        found = plans.get(resource_type)
        if found is None:
            found = []
            for rule in self._PolicyAnalyzerServicer__policies:
                level = self._get_enforcement_level(rule)
                if level == sdk.EnforcementLevel.DISABLED or not isinstance(rule, sdk.ResourceValidationPolicy):
                    continue
                skips = getattr(rule, "skips", None)
                reason = "Policy does not implement validate" if not rule.has_validation() else \
                    skips(resource_type) if skips is not None else None
                if reason is not None:
                    answer = proto.PolicyNotApplicable(policy_name=rule.name, reason=reason)
                    if found and found[-1][0] is None:
                        found[-1][2].append(answer)
                    else:
                        found.append((None, None, [answer]))
                    continue
                if level == sdk.EnforcementLevel.REMEDIATE:
                    level = sdk.EnforcementLevel.MANDATORY
                found.append((rule, level, []))
            plans[resource_type] = found
        return found

    def run(self: Any, rule: Any, args: Any, response: Any, level: Any) -> None:
        report = self._create_report_violation(response, rule.name, rule.description, level, rule.severity)
        try:
            rule.validate(args, report)
        except sdk.UnknownValueError as e:
            name, version = self._PolicyAnalyzerServicer__policy_pack_name, self._PolicyAnalyzerServicer__policy_pack_version
            response.diagnostics.append(proto.AnalyzeDiagnostic(
                policyName=rule.name, policyPackName=name, policyPackVersion=version,
                message=f"can't run policy '{rule.name}' from policy pack '{name}@v{version}' during preview: "
                        f"{e.message}",
                urn="", description=rule.description,
                enforcementLevel=self._map_enforcement_level(sdk.EnforcementLevel.ADVISORY)))
        except sdk._NotApplicableError as e:
            response.not_applicable.append(proto.PolicyNotApplicable(policy_name=rule.name, reason=e.reason or ""))

    def analyze(self: Any, request: Any, _context: Any) -> Any:
        self._configure_runtime_settings()
        response = proto.AnalyzeResponse()
        shared: list[Any] = []
        for rule, level, answers in plan(self, request.type):
            if rule is None:
                response.not_applicable.extend(answers)
                continue
            if not shared:
                shared.extend((shared_properties(request.properties), self._get_resource_options(request),
                               self._get_provider_resource(request)))
            props, opts, provider = shared
            args = sdk.ResourceValidationArgs(request.type, props, request.urn, request.name, opts, provider,
                                              self._get_policy_config(rule.name),
                                              self._PolicyAnalyzerServicer__stack_tags)
            run(self, rule, args, response, level)
        return response

    def analyze_stack(self: Any, request: Any, _context: Any) -> Any:
        self._configure_runtime_settings()
        response = proto.AnalyzeResponse()
        resources: list[Any] = []
        for rule in self._PolicyAnalyzerServicer__policies:
            level = self._get_enforcement_level(rule)
            if level == sdk.EnforcementLevel.DISABLED or not isinstance(rule, sdk.StackValidationPolicy):
                continue
            if level == sdk.EnforcementLevel.REMEDIATE:
                level = sdk.EnforcementLevel.MANDATORY
            if not resources:
                resources = stack_resources(self, request.resources)
            args = sdk.StackValidationArgs(resources, self._get_policy_config(rule.name),
                                           self._PolicyAnalyzerServicer__stack_tags)
            run(self, rule, args, response, level)
        return response

    def configure_and_replan(self: Any, request: Any, context: Any) -> Any:
        plans.clear()  # enforcement levels may change
        return configure(self, request, context)

    servicer._get_provider_resource = provider_resource
    servicer.Analyze = analyze
    servicer.AnalyzeStack = analyze_stack
    servicer.Configure = configure_and_replan
    servicer._shares_request_work = True
