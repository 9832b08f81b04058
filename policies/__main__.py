"""Builds the policy pack and nothing else: the rules live in `platform_policies`.

`PolicyPack(...)` starts the analyzer's gRPC server and blocks, so it must never run on
import; tests and the offline preview import `platform_policies` instead.
"""

import gc
from concurrent import futures
from types import SimpleNamespace

from pulumi_policy import EnforcementLevel, PolicyPack
from pulumi_policy import policy as sdk

from platform_policies import ALL_POLICIES, PACK_NAME
from platform_policies.decoding import share_decoding_across_rules, share_request_work_across_rules

share_decoding_across_rules()
share_request_work_across_rules()
# The pack allocates a tree of dicts and lists for every resource it reads and keeps them for
# the rules that follow; none holds a reference cycle. At the default thresholds the cyclic
# collector would walk all of them again and again as more arrive; collect rarely, and never
# the modules and rules loaded above.
gc.freeze()
gc.set_threshold(200_000, 50, 50)
# One request at a time: the rules are Python, which runs one thread at a time anyway, and the
# four threads pulumi-policy's server would start spend time handing the interpreter lock to
# each other (prod's two layers: about a tenth of the check, bench/policy.py).
sdk.futures = SimpleNamespace(ThreadPoolExecutor=lambda max_workers=None: futures.ThreadPoolExecutor(max_workers=1))
PolicyPack(
    name=PACK_NAME,
    policies=ALL_POLICIES,
    enforcement_level=EnforcementLevel.MANDATORY,
    description="Data residency, encryption and exposure guardrails for the sovereign ML platform",
)
