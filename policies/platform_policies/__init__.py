"""The platform's policy rules, importable without starting the pack.

Grouped as the security team reads them: residency, encryption at rest, encryption in
transit, exposure, Kubernetes guardrails, tags, and the rules of a stack on a customer's own
cluster. Each rule names its control through its
compliance framework; docs/policy-pack.md lists them.
"""

from .cis_kubernetes import (
    k8s_namespaces_enforce_pod_security,
    k8s_no_workloads_in_default_namespace,
    k8s_service_account_tokens_where_needed,
)
from .customer_cluster import (
    no_aws_resources_on_customer_cluster,
    nothing_exposed_outside_the_cluster,
    object_store_encryption_named,
    object_store_encryption_stated,
    object_store_endpoints_allowed,
)
from .data_paths import no_data_paths_abroad
from .databases import databases_private_and_tls
from .edge import no_global_edge_data_paths
from .encryption import (
    block_storage_encrypted_with_cmk,
    databases_encrypted_with_cmk,
    eks_secrets_encrypted_with_cmk,
    file_systems_encrypted_with_cmk,
    kms_keys_rotate,
    logs_encrypted_with_cmk,
    messaging_encrypted_with_cmk,
    registries_encrypted_with_cmk,
    secrets_encrypted_with_cmk,
)
from .egress import no_open_internet_egress
from .exposure import (
    eks_endpoint_private,
    no_external_access,
    no_public_ips_on_nodes,
    no_world_open_ingress,
    no_world_open_ports,
)
from .kubernetes import (
    k8s_containers_have_limits,
    k8s_gpu_pods_use_limits_and_tolerate_taint,
    k8s_charts_from_allowed_registries,
    k8s_images_from_allowed_registries,
    k8s_images_pinned,
    k8s_pod_security_standards,
    feature_server_in_cluster,
)
from .replication import dynamodb_single_region_tables, kms_keys_single_region, no_cross_region_replication
from .residency import availability_zones_in_allowed_regions, aws_resources_in_allowed_regions
from .s3 import (
    s3_buckets_block_public_access,
    s3_buckets_encrypted_with_cmk,
    s3_buckets_tls_only,
    s3_public_access_settings,
)
from .tagging import storage_and_compute_tagged
from .transit import elasticache_encrypted_in_transit, load_balancer_listeners_tls

PACK_NAME = "mlplat-guardrails"

RESIDENCY = [
    aws_resources_in_allowed_regions,
    availability_zones_in_allowed_regions,
    no_cross_region_replication,
    dynamodb_single_region_tables,
    kms_keys_single_region,
    no_global_edge_data_paths,
    no_data_paths_abroad,
]
ENCRYPTION_AT_REST = [
    s3_buckets_encrypted_with_cmk,
    block_storage_encrypted_with_cmk,
    file_systems_encrypted_with_cmk,
    eks_secrets_encrypted_with_cmk,
    logs_encrypted_with_cmk,
    registries_encrypted_with_cmk,
    databases_encrypted_with_cmk,
    secrets_encrypted_with_cmk,
    messaging_encrypted_with_cmk,
    kms_keys_rotate,
]
ENCRYPTION_IN_TRANSIT = [
    s3_buckets_tls_only,
    load_balancer_listeners_tls,
    elasticache_encrypted_in_transit,
    databases_private_and_tls,
]
EXPOSURE = [
    s3_public_access_settings,
    s3_buckets_block_public_access,
    no_world_open_ports,
    no_world_open_ingress,
    eks_endpoint_private,
    no_public_ips_on_nodes,
    no_external_access,
    feature_server_in_cluster,
    no_open_internet_egress,
]
KUBERNETES = [
    k8s_charts_from_allowed_registries,
    k8s_images_from_allowed_registries,
    k8s_images_pinned,
    k8s_containers_have_limits,
    k8s_gpu_pods_use_limits_and_tolerate_taint,
    k8s_pod_security_standards,
    k8s_namespaces_enforce_pod_security,
    k8s_no_workloads_in_default_namespace,
    k8s_service_account_tokens_where_needed,
]
TAGS = [storage_and_compute_tagged]
# A stack on a customer's own in-country cluster (deployment: customer-cluster in its policy
# config); on AWS stacks these declare themselves not applicable.
CUSTOMER_CLUSTER = [
    no_aws_resources_on_customer_cluster,
    object_store_endpoints_allowed,
    nothing_exposed_outside_the_cluster,
    object_store_encryption_named,
    object_store_encryption_stated,
]

ALL_POLICIES = [*RESIDENCY, *ENCRYPTION_AT_REST, *ENCRYPTION_IN_TRANSIT, *EXPOSURE, *KUBERNETES, *TAGS,
                *CUSTOMER_CLUSTER]

__all__ = ["ALL_POLICIES", "CUSTOMER_CLUSTER", "PACK_NAME"]
