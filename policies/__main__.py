"""Builds the policy pack and nothing else: the rules live in `platform_policies`.

`PolicyPack(...)` starts the analyzer's gRPC server and blocks, so it must never run on
import; tests and the offline preview import `platform_policies` instead.
"""

from pulumi_policy import EnforcementLevel, PolicyPack

from platform_policies import ALL_POLICIES, PACK_NAME
from platform_policies.decoding import share_decoding_across_rules

share_decoding_across_rules()
PolicyPack(
    name=PACK_NAME,
    policies=ALL_POLICIES,
    enforcement_level=EnforcementLevel.MANDATORY,
    description="Data residency, encryption and exposure guardrails for the sovereign ML platform",
)
