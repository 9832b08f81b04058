"""The private subnets' way out, as the cloud layer declares it (the offline preview):
prod (restricted) only through AWS Network Firewall's allow-list, an environment with
egress none has no way out at all, dev keeps its NAT gateway; and the config refuses an
open route for a restricted environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra import cli
from infra.config import load_stack
from infra.platform import build_platform
from tests.component.recorder import record
from tests.conftest import preview

RT = "aws:ec2/routeTable:RouteTable"
REPO = Path(__file__).resolve().parents[2]


def _of(result, kind: str) -> list:
    return [r for r in result.registrations if r.type == kind]


def _tier(table) -> str:
    return table.inputs()["tags"].get("mlplat.io/tier", "")


def test_prod_reaches_the_internet_only_through_the_firewalls_allow_list():
    result = preview("prod")
    [firewall] = _of(result, "aws:networkfirewall/firewall:Firewall")
    assert len(firewall.inputs()["subnetMappings"]) == 3, "an endpoint in each zone"
    tables = _of(result, RT)
    private = {t.inputs()["tags"]["Name"].rsplit("-private-", 1)[1]: t.inputs()["routes"] for t in tables
               if _tier(t) == "private"}
    public = {t.inputs()["tags"]["Name"].rsplit("-public-", 1)[1]: t.inputs()["routes"] for t in tables
              if _tier(t) == "public"}
    assert set(private) == set(public) == {"mec1-az1", "mec1-az2", "mec1-az3"}
    subnets = {(s.inputs()["availabilityZoneId"], s.inputs()["tags"]["mlplat.io/tier"]): s.inputs()["cidrBlock"]
               for s in _of(result, "aws:ec2/subnet:Subnet")}
    endpoints = set()
    for zone, routes in private.items():
        # The only way out is a firewall endpoint, the same one the zone's public table sends
        # the zone's private return traffic to (the firewall sees both directions).
        [(destination, endpoint)] = [(r["cidrBlock"], r.get("vpcEndpointId")) for r in routes]
        assert destination == "0.0.0.0/0" and str(endpoint).startswith("vpce-")
        back = {r["cidrBlock"]: r for r in public[zone]}
        assert back[subnets[(zone, "private")]] == {"cidrBlock": subnets[(zone, "private")], "vpcEndpointId": endpoint}
        assert set(back["0.0.0.0/0"]) == {"cidrBlock", "gatewayId"}
        endpoints.add(endpoint)
    assert len(endpoints) == 3, "each zone its own endpoint"
    for table in tables:
        if _tier(table) == "firewall":
            assert [set(r) for r in table.inputs()["routes"]] == [{"cidrBlock", "natGatewayId"}]
    # The policy drops whatever the allow-list does not pass, any protocol, in strict order.
    [policy] = _of(result, "aws:networkfirewall/firewallPolicy:FirewallPolicy")
    body = policy.inputs()["firewallPolicy"]
    assert body["statefulDefaultActions"] == ["aws:drop_established", "aws:alert_established"]
    assert body["statefulEngineOptions"]["ruleOrder"] == "STRICT_ORDER"
    [rules] = _of(result, "aws:networkfirewall/ruleGroup:RuleGroup")
    listed = rules.inputs()["ruleGroup"]["rulesSource"]["rulesSourceList"]
    assert listed["generatedRulesType"] == "ALLOWLIST"
    assert listed["targets"] == list(load_stack("prod").network.egress.allowed_domains)
    assert "github.com" in listed["targets"], "the deploy runner reaches GitHub"


def test_egress_none_has_no_way_out():
    config = load_stack("prod")
    config = config.model_copy(update={"deploy_runner": None, "network": config.network.model_copy(update={
        "egress": config.network.egress.model_copy(update={"mode": "none", "allowed_domains": ()})})})
    result = record(lambda _provider: build_platform(config), stack="prod")
    for kind in ("aws:ec2/internetGateway:InternetGateway", "aws:ec2/natGateway:NatGateway", "aws:ec2/eip:Eip",
                 "aws:networkfirewall/firewall:Firewall"):
        assert not _of(result, kind), kind
    assert all(t.inputs().get("routes") in ([], None) for t in _of(result, RT))
    egress = [r.inputs() for r in _of(result, "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule")]
    assert not [r for r in egress if r.get("cidrIpv4") == "0.0.0.0/0"]
    assert any(r.get("prefixListId") for r in egress), "HTTPS to S3 through its gateway endpoint"


def test_dev_keeps_its_nat_gateway():
    result = preview("dev")
    private = [t for t in _of(result, RT) if _tier(t) == "private"]
    assert private and all([set(r) for r in t.inputs()["routes"]] == [{"cidrBlock", "natGatewayId"}] for t in private)
    assert not _of(result, "aws:networkfirewall/firewall:Firewall")


EGRESS = ("    egress:\n      mode: allow-list\n      allowedDomains:\n        - github.com\n        - .github.com\n"
          "        - .githubusercontent.com\n")


@pytest.mark.parametrize("old, new, expected", [
    (EGRESS, "    egress: {mode: nat}\n", "mlplat:network.egress.mode: nat opens the internet to a restricted "
                                            "environment's private subnets"),
    ("      mode: allow-list\n", "      mode: none\n", "allowedDomains are set but mode is none"),
    ("        - github.com\n", "        - '*.github.com'\n", "'*.github.com' is not a domain name"),
    (EGRESS, "    egress:\n      mode: allow-list\n", "mode allow-list with no allowedDomains"),
])
def test_an_open_or_malformed_egress_is_refused_in_one_line(tmp_path, capsys, old, new, expected):
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    text = (REPO / "stacks" / "Pulumi.prod.yaml").read_text()
    assert old in text
    (stacks / "Pulumi.prod.yaml").write_text(text.replace(old, new, 1))
    assert cli.main(["preview", "--stack", "prod", "--stacks-dir", str(stacks), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and expected in err, err


def test_egress_none_with_a_deploy_runner_is_refused(tmp_path, capsys):
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    text = (REPO / "stacks" / "Pulumi.prod.yaml").read_text()
    start = text.index("    egress:\n")
    end = text.index("  mlplat:nodePools:")
    (stacks / "Pulumi.prod.yaml").write_text(text[:start] + "    egress: {mode: none}\n" + text[end:])
    assert cli.main(["preview", "--stack", "prod", "--stacks-dir", str(stacks), "--quiet"]) == 2
    assert "none, but the deploy runner must reach GitHub" in capsys.readouterr().err
