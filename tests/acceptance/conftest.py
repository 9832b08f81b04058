"""The post-deploy acceptance suite: run it after `pulumi up` against the stack's cluster.

    pytest tests/acceptance --stack prod [--kubeconfig PATH] [--kube-context NAME]

Without --stack (as in `make test`) every test here is skipped, with the reason: there is
no cluster to check. The checks themselves are proven on recorded healthy and broken
fixtures by tests/unit/test_acceptance_checks.py, which always runs. docs/acceptance.md
explains each check and how to read a failure.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.acceptance.cluster import ClusterState, log_pods
from infra.acceptance.expect import PoolExpectation, StackExpectation, stack_expectation
from infra.acceptance.node import NodeFacts, collect_nodes

HERE = Path(__file__).resolve().parent
NOT_AGAINST_A_CLUSTER = (
    "acceptance suite: not run against a cluster; after `pulumi up` run "
    "`pytest tests/acceptance --stack <env>` with a kubeconfig for that stack's cluster"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("acceptance", "post-deploy acceptance suite (tests/acceptance)")
    group.addoption("--stack", metavar="ENV", help="stack whose cluster to check (stacks/Pulumi.<ENV>.yaml)")
    group.addoption("--kubeconfig", metavar="PATH",
                    help="kubeconfig of that cluster (default: $KUBECONFIG, else ~/.kube/config)")
    group.addoption("--kube-context", metavar="NAME", help="kubeconfig context (default: the current one)")
    group.addoption("--node-transport", choices=("debug-pod", "ssh"), default="debug-pod",
                    help="how node checks reach a node: a privileged debug pod per node (default) or SSH")
    group.addoption("--debug-namespace", default="kube-system", metavar="NS",
                    help="namespace for the debug pods; it must admit privileged pods (default kube-system)")
    group.addoption("--debug-image", metavar="IMAGE",
                    help="image for the debug pods (default: node-debug from the in-region mirror)")
    # With ssh, pytest-testinfra's own --ssh-identity-file and --ssh-config apply too.
    group.addoption("--ssh-user", default="ec2-user", help="with --node-transport ssh (default ec2-user)")
    group.addoption("--inference-url", metavar="HOST:PORT",
                    help="Triton gRPC address for the smoke client (default: a port-forward to its Service)")
    group.addoption("--inference-tls", action="store_true", help="--inference-url speaks TLS (the internal NLB)")
    group.addoption("--replay", metavar="DIR", type=Path,
                    help="check a recorded cluster (cluster.yaml, nodes/<name>/) instead of a live one")


_LIVE = pytest.StashKey()
_SUMMARY = pytest.StashKey()


def pytest_configure(config: pytest.Config) -> None:
    """With --stack, fail at once, in one line, on a bad stack or an unusable kubeconfig,
    rather than once per test."""
    stack = config.getoption("stack", None)
    if not stack:
        return
    config.stash[_SUMMARY] = []
    from infra.config import ConfigError, load_stack

    try:
        load_stack(stack)
    except ConfigError as err:
        raise pytest.UsageError(f"--stack {stack}: {err}") from None
    if config.getoption("replay"):
        config.stash[_LIVE] = None
        return
    from infra.acceptance.live import LiveCluster

    kubeconfig = config.getoption("kubeconfig")
    try:
        config.stash[_LIVE] = LiveCluster(kubeconfig, config.getoption("kube_context"))
    except Exception as err:  # noqa: BLE001 - the client raises several kinds; all mean the same
        where = kubeconfig or "$KUBECONFIG or ~/.kube/config"
        raise pytest.UsageError(f"--stack {stack}: cannot use the kubeconfig ({where}): {err}") from None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("stack", None):
        return
    skip = pytest.mark.skip(reason=NOT_AGAINST_A_CLUSTER)
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(skip)


def _transport(config: pytest.Config) -> str:
    if config.getoption("replay"):
        return "recorded node roots"
    if config.getoption("node_transport") == "ssh":
        return f"SSH as {config.getoption('ssh_user')}"
    return f"debug pods in {config.getoption('debug_namespace')}"


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    """Say what was checked, so a green run shows it looked at the cluster it should have."""
    lines = config.stash.get(_SUMMARY, None)
    if lines:
        terminalreporter.section("acceptance")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def stack(request: pytest.FixtureRequest) -> str:
    return request.config.getoption("stack")


@pytest.fixture(scope="session")
def platform_config(stack: str):
    from infra.config import load_stack

    return load_stack(stack)  # already validated in pytest_configure


@pytest.fixture(scope="session")
def expect(stack: str, platform_config) -> StackExpectation:
    return stack_expectation(stack, platform_config)


@pytest.fixture(scope="session")
def live(request: pytest.FixtureRequest):
    """The cluster's API, or None when replaying a recording."""
    return request.config.stash[_LIVE]


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest, live, stack: str) -> ClusterState:
    replay = request.config.getoption("replay")
    if replay:
        from infra.acceptance.replay import read_state

        state = read_state(replay)
    else:
        state = live.read_state(log_pods)
    source = f"replay of {replay}" if replay else "live cluster"
    request.config.stash[_SUMMARY].append(
        f"stack {stack}, {source}: {len(state.nodes)} nodes, {len(state.pods)} pods, {len(state.jobs)} jobs"
    )
    return state


@pytest.fixture(scope="session")
def node_pools(cluster: ClusterState, expect: StackExpectation) -> dict[str, PoolExpectation]:
    """The nodes the node checks visit (those of the stack's pools), with their pool."""
    pools = {n["metadata"]["name"]: expect.pool_of(n) for n in cluster.nodes}
    return {node: pool for node, pool in pools.items() if pool is not None}


@pytest.fixture(scope="session")
def node_facts(request: pytest.FixtureRequest, live, cluster: ClusterState, node_pools, platform_config
               ) -> dict[str, NodeFacts | str]:
    """What each node of the stack's pools shows, read once for all node tests."""
    nodes = sorted(node_pools)
    request.config.stash[_SUMMARY].append(f"node checks on {len(nodes)} nodes via {_transport(request.config)}")
    opt = request.config.getoption
    if opt("replay"):
        from infra.acceptance.replay import node_view

        return collect_nodes({node: node_view(opt("replay"), node) for node in nodes})
    if opt("node_transport") == "ssh":
        from infra.acceptance.live import ssh_view

        by_name = {n["metadata"]["name"]: n for n in cluster.nodes}
        return collect_nodes({
            node: ssh_view(by_name[node], opt("ssh_user"), opt("ssh_identity_file"), opt("ssh_config"))
            for node in nodes
        })
    image = opt("debug_image") or _mirror_debug_image(cluster, platform_config.region)
    namespace = opt("debug_namespace")
    with live.debug_views(nodes, namespace, image) as views:
        return collect_nodes(views)


def _mirror_debug_image(cluster: ClusterState, region: str) -> str:
    from infra.acceptance.live import mirror_account
    from infra.versions import image_uri

    account = mirror_account(cluster, region)
    if account is None:
        raise pytest.UsageError(
            f"no pod runs an image from the in-region mirror in {region}, so the debug image's registry is "
            "unknown; pass --debug-image <account>.dkr.ecr.<region>.amazonaws.com/mlplat/mirror/node-debug:<tag>"
        )
    return image_uri("node-debug", account, region)


@pytest.fixture(scope="session")
def inference_smoke(request: pytest.FixtureRequest, cluster: ClusterState, expect: StackExpectation):
    """The smoke client's result against the stack's Triton, or why it could not run."""
    opt = request.config.getoption
    served_model = expect.served_model
    if served_model is None:
        return None
    if opt("replay"):
        from infra.acceptance.replay import read_smoke

        return read_smoke(opt("replay")) or "the replay holds no inference-smoke.json"
    from infra.acceptance.inference import port_forward, service_grpc_port, smoke_outcome, triton_service
    from workloads.serve.client import connect, smoke_test

    def ask(address: str, tls: bool):
        client = connect(address, ssl=tls)
        try:
            return smoke_outcome(smoke_test(client, served_model))
        finally:
            client.close()

    try:
        if opt("inference_url"):
            return ask(opt("inference_url"), opt("inference_tls"))
        service = triton_service(cluster)
        if service is None:
            return "no Service in front of Triton's gRPC port 8001 has running pods"
        meta = service["metadata"]
        with port_forward(meta["namespace"], meta["name"], service_grpc_port(service),
                          opt("kubeconfig"), opt("kube_context")) as address:
            return ask(address, False)
    except Exception as err:  # noqa: BLE001 - any failure to ask is the finding
        return f"{type(err).__name__}: {err}"
