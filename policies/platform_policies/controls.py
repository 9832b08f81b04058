"""The controls the rules serve, as pulumi-policy compliance-framework records.

Security teams file the preview's evidence report against these references.
"""

from pulumi_policy import PolicyComplianceFramework

PDPL = "UAE PDPL (Federal Decree-Law No. 45 of 2021)"
ISO = "ISO/IEC 27001:2022 Annex A"
CIS_EKS = "CIS Amazon EKS Benchmark"


def pdpl(reference: str, specification: str) -> PolicyComplianceFramework:
    return PolicyComplianceFramework(name=PDPL, version="2021", reference=reference, specification=specification)


def iso(reference: str, specification: str) -> PolicyComplianceFramework:
    return PolicyComplianceFramework(name=ISO, version="2022", reference=reference, specification=specification)


def cis_eks(reference: str, specification: str) -> PolicyComplianceFramework:
    return PolicyComplianceFramework(name=CIS_EKS, version="1.7.0", reference=reference, specification=specification)


# Controls more than one rule serves.
NETWORK_SECURITY = iso("A.8.20", "Networks security: networks and network devices are secured and controlled.")
NO_ANONYMOUS_ACCESS = iso("A.8.3", "Information access restriction: no anonymous access to stored data.")
TLS_TO_STORAGE = iso("A.8.24", "Use of cryptography: data in transit to storage is encrypted.")
CROSS_BORDER_TRANSFER = pdpl("Article 22", "Cross-border transfer of personal data only where the UAE Data Office "
                             "has approved the destination's protection level.")
IN_STATE = pdpl("Articles 22-23", "Personal data stays in the State unless a transfer is lawful.")
ENCRYPTED_AT_REST = pdpl("Article 20(1)(a)", "Encryption of personal data as a technical security measure.")
