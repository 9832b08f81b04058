"""Builds the policy pack and nothing else: the rules live in `platform_policies`.

`PolicyPack(...)` starts the analyzer's gRPC server and blocks, so it must never run on
import; tests and the offline preview import `platform_policies` instead.
"""

import gc

from pulumi_policy import EnforcementLevel, PolicyPack

from platform_policies import ALL_POLICIES, PACK_NAME
from platform_policies.decoding import share_decoding_across_rules, share_request_work_across_rules

share_decoding_across_rules()
share_request_work_across_rules()
# The pack allocates a tree of dicts and lists for every resource it reads and keeps them for
# the rules that follow; none holds a reference cycle. At the default thresholds the cyclic
# collector would walk all of them again and again (a third of a large stack's check time);
# collect rarely, and never the modules and rules loaded above.
gc.freeze()
gc.set_threshold(200_000, 50, 50)
PolicyPack(
    name=PACK_NAME,
    policies=ALL_POLICIES,
    enforcement_level=EnforcementLevel.MANDATORY,
    description="Data residency, encryption and exposure guardrails for the sovereign ML platform",
)
