"""The pack decodes (and proxies) each resource once per request, however many rules read it,
and not at all when no rule reads it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

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
from platform_policies.decoding import share_decoding_across_rules
share_decoding_across_rules()
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
