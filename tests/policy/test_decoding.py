"""The pack decodes (and proxies) each resource once per request, however many rules read it,
and not at all when no rule reads it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONFIG_DIR = REPO / "policies" / "config"

# Runs in its own process: the shim changes pulumi-policy's module for the process.
PROBE = """
import sys
sys.path.insert(0, "policies")
from google.protobuf import json_format, struct_pb2
from pulumi_policy import policy
import pulumi_policy.deserialize as real
calls = []
original = real.deserialize_properties
policy.deserialize_properties = lambda props, keep=None: calls.append(1) or original(props, keep)
converted = []
to_dict = json_format.MessageToDict
json_format.MessageToDict = lambda message, *a, **k: converted.append(1) or to_dict(message, *a, **k)
from platform_policies import decoding
from platform_policies.decoding import share_decoding_across_rules
share_decoding_across_rules()
# A Struct (a resource's properties) is converted and deserialized by the shim's own decoder,
# in one walk: each decode counts as one conversion and one deserialization.
deserialized_struct = decoding.deserialized_struct
decoding.deserialized_struct = lambda message: converted.append(1) or calls.append(1) or deserialized_struct(message)
a, b = struct_pb2.Struct(), struct_pb2.Struct()
a.update({"bucket": "x", "tags": {"owner": "ml"}})
b.update({"bucket": "x", "tags": {"owner": "ml"}})
first = policy.deserialize_properties(policy.json_format.MessageToDict(a))
again = policy.deserialize_properties(policy.json_format.MessageToDict(a))
other = policy.deserialize_properties(policy.json_format.MessageToDict(b))
assert first is again and first is not other, (first, again, other)
# One proxy per decoded copy; nothing is decoded until a rule reads it.
proxy = policy.unknown_checking_proxy(first)
assert proxy is policy.unknown_checking_proxy(again)
assert policy.unknown_checking_proxy(other) is not proxy
assert calls == [], calls
assert proxy["tags"]["owner"] == "ml" and dict(proxy)["bucket"] == "x"
assert len(calls) == 1, calls
assert dict(policy.unknown_checking_proxy(other)) == dict(proxy) and len(calls) == 2, calls
assert policy.json_format.MessageToDict(a, preserving_proto_field_name=True) == {"bucket": "x", "tags": {"owner": "ml"}}
# Remediation decodes at once, as the SDK expects.
assert policy.deserialize_properties(policy.json_format.MessageToDict(a), True) == {"bucket": "x", "tags": {"owner": "ml"}}
from pulumi_policy.proxy import UnknownValueError
# It still refuses values unknown at preview, decoded lazily or not.
c = struct_pb2.Struct()
c.update({"arn": "04da6b54-80e4-46f7-96ec-b56ff0331ba9"})
lazy = policy.unknown_checking_proxy(policy.deserialize_properties(policy.json_format.MessageToDict(c)))
try:
    lazy["arn"]
except UnknownValueError:
    pass
else:
    raise AssertionError("an unknown value was handed to a rule")
unknown = policy.unknown_checking_proxy({"arn": "04da6b54-80e4-46f7-96ec-b56ff0331ba9"})
try:
    unknown["arn"]
except UnknownValueError:
    pass
else:
    raise AssertionError("an unknown value was handed to a rule")
# Inside the analyzer's Analyze, even the Struct-to-dict step waits for a rule to read;
# Configure keeps a plain dict (the policies' config).
def Analyze(message):
    return policy.unknown_checking_proxy(policy.deserialize_properties(policy.json_format.MessageToDict(message)))
def Configure(message):
    return policy.json_format.MessageToDict(message)
crd = struct_pb2.Struct()
crd.update({"spec": {"group": "example.com"}})
converted.clear()
read_later = Analyze(crd)
assert converted == [], converted
assert read_later["spec"]["group"] == "example.com" and len(converted) == 1, converted
settings = struct_pb2.Struct()
settings.update({"allowedRegions": ["me-central-1"]})
assert Configure(settings) == {"allowedRegions": ["me-central-1"]}
print("ok")
"""


def test_each_message_is_decoded_once_and_distinct_messages_apart():
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def _configured_servicer(config_path: Path):
    """A pack's analyzer servicer in this process, configured as the preview configures it."""
    from google.protobuf import struct_pb2
    from platform_policies import ALL_POLICIES, PACK_NAME
    from pulumi.runtime.proto import analyzer_pb2
    from pulumi_policy import EnforcementLevel
    from pulumi_policy.policy import _PolicyAnalyzerServicer

    from infra.preview.analyzer import load_policy_config

    servicer = _PolicyAnalyzerServicer(PACK_NAME, "0.1.0", ALL_POLICIES, EnforcementLevel.MANDATORY)
    config = load_policy_config(config_path)
    request = analyzer_pb2.ConfigureAnalyzerRequest()
    for rule in ALL_POLICIES:
        entry = analyzer_pb2.PolicyConfig(enforcementLevel=analyzer_pb2.MANDATORY)
        settings = config.get(rule.name)
        if isinstance(settings, dict) and settings:
            properties = struct_pb2.Struct()
            properties.update(settings)
            entry.properties.CopyFrom(properties)
        request.policyConfig[rule.name].CopyFrom(entry)
    servicer.Configure(request, None)
    return servicer


# Red-team attempts, for answers that carry violations: Pod Security, images, external
# access, data paths, a stack rule (TLS) and a namespace.
ATTEMPTS = ("namespace_without_pod_security.py", "malformed_digest.py", "key_open_to_everyone.py",
            "provider_endpoint_abroad.py", "tls_deny_narrowed.py", "image_from_another_account.py")


def _registrations(stack: str) -> list:
    from infra.preview.analyzer import PolicyPackProcess
    from infra.preview.engine import load_program, run_preview
    from tests.conftest import preview

    if stack != "red team":
        return preview(stack).registrations
    pack = PolicyPackProcess()
    try:
        corpus = REPO / "tests" / "fixtures" / "redteam"
        return [r for name in ATTEMPTS
                for r in run_preview("prod", program=load_program(corpus / name), pack=pack).registrations]
    finally:
        pack.close()


@pytest.mark.parametrize(("stack", "config"), [("prod", "prod"), ("prod-cluster", "prod"), ("onprem", "onprem"),
                                               ("red team", "prod")])
def test_the_shared_analyzer_answers_as_the_sdks_does(stack, config):
    """Every resource of the stack through pulumi-policy's own Analyze and AnalyzeStack and
    through the pack's (share_request_work_across_rules): byte-identical answers; and every
    resource's properties converted by the shim's Struct converter equal json_format's."""
    from google.protobuf import json_format
    from pulumi.runtime.proto import analyzer_pb2
    from pulumi_policy import policy as sdk

    from infra.preview.analyzer import StreamingAnalysis
    from pulumi_policy.deserialize import deserialize_properties

    from platform_policies.decoding import deserialized_struct, share_decoding_across_rules, \
        share_request_work_across_rules, struct_to_dict

    registrations = _registrations(stack)
    for reg in registrations:
        assert struct_to_dict(reg.properties) == json_format.MessageToDict(reg.properties), reg.urn
        assert deserialized_struct(reg.properties) == deserialize_properties(struct_to_dict(reg.properties)), reg.urn
    servicer_class = sdk._PolicyAnalyzerServicer
    saved = {name: servicer_class.__dict__[name]
             for name in ("Analyze", "AnalyzeStack", "Configure", "_get_provider_resource")}
    streaming = StreamingAnalysis.__new__(StreamingAnalysis)
    streaming.providers = {r.urn: r for r in registrations if r.is_provider}
    requests = [streaming._analyze_request(r) for r in registrations if not r.is_provider]
    stack_request = analyzer_pb2.AnalyzeStackRequest()
    for reg, request in zip([r for r in registrations if not r.is_provider], requests):
        resource = stack_request.resources.add(type=request.type, urn=request.urn, name=request.name)
        resource.MergeFrom(streaming._stack_fields(reg))
        resource.properties.CopyFrom(request.properties)
        resource.options.CopyFrom(request.options)
        if request.HasField("provider"):
            resource.provider.CopyFrom(request.provider)
    path = CONFIG_DIR / f"{config}.json"
    share_decoding_across_rules()  # both sides decode once per request: what differs is the sharing

    def answers() -> list[bytes]:
        servicer = _configured_servicer(path)
        found = [servicer.Analyze(request, None).SerializeToString(deterministic=True) for request in requests]
        return [*found, servicer.AnalyzeStack(stack_request, None).SerializeToString(deterministic=True)]

    sdks = answers()
    try:
        share_request_work_across_rules()
        ours = answers()
    finally:
        for name, method in saved.items():
            setattr(servicer_class, name, method)
        servicer_class._shares_request_work = False
    assert len(ours) == len(sdks) and sum(len(a) for a in sdks) > 0
    assert [i for i, (a, b) in enumerate(zip(sdks, ours)) if a != b] == []
    # The stack rules get the resources linked as the SDK links them (no rule of ours reads
    # `dependencies` or `parent` yet; one that does must not find them missing).
    from platform_policies.decoding import stack_resources
    linked = {r.urn: r for r in stack_resources(_configured_servicer(path), stack_request.resources)}
    for requested in stack_request.resources:
        resource = linked[requested.urn]
        assert [d.urn for d in resource.dependencies] == [d for d in requested.dependencies if d in linked]
        assert (resource.parent.urn if resource.parent else None) == (
            requested.parent if requested.parent in linked else None)
        assert {k: [d.urn for d in v] for k, v in resource.property_dependencies.items()} == {
            k: [u for u in v.urns if u in linked] for k, v in requested.propertyDependencies.items()}
    if stack == "red team":  # the answers compared carry violations, not only "not applicable"
        assert sum(len(analyzer_pb2.AnalyzeResponse.FromString(a).diagnostics) for a in sdks) >= len(ATTEMPTS)


def test_the_one_walk_decoder_hands_signed_values_to_the_sdk():
    """Secrets, assets and archives (maps carrying Pulumi's signature key), at any depth, come
    out of the pack's one-walk decoder as the SDK's own deserializer gives them."""
    from google.protobuf import struct_pb2
    from pulumi_policy.deserialize import SPECIAL_ARCHIVE_SIG, SPECIAL_ASSET_SIG, SPECIAL_SECRET_SIG, SPECIAL_SIG_KEY, \
        deserialize_properties

    from platform_policies.decoding import deserialized_struct, struct_to_dict

    secret = {SPECIAL_SIG_KEY: SPECIAL_SECRET_SIG, "value": {"password": "hunter2", "list": [1.0, True, None]}}
    asset = {SPECIAL_SIG_KEY: SPECIAL_ASSET_SIG, "text": "hello"}
    archive = {SPECIAL_SIG_KEY: SPECIAL_ARCHIVE_SIG, "assets": {"a.txt": asset}}
    struct = struct_pb2.Struct()
    struct.update({"top": secret, "nested": {"deeper": [secret, {"file": asset}]}, "code": archive, "plain": "x"})
    ours, sdks = deserialized_struct(struct), deserialize_properties(struct_to_dict(struct))
    assert ours["top"] == {"password": "hunter2", "list": [1.0, True, None]} == sdks["top"]
    assert ours["nested"]["deeper"][0] == sdks["nested"]["deeper"][0] == secret["value"] and ours["plain"] == "x"
    for found in (ours, sdks):  # assets compare by identity: their types and contents, then
        assert type(found["code"]).__name__ == "AssetArchive" and found["code"].assets["a.txt"].text == "hello"
        assert type(found["nested"]["deeper"][1]["file"]).__name__ == "StringAsset"
        assert found["nested"]["deeper"][1]["file"].text == "hello"
