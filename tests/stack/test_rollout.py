"""Two versions behind the inference gateway, judged on what the stacks will apply: the
split the routes' weights make at each step of a rollout, who the gateway's rendered
SecurityPolicy lets through (tokens signed here, checked with its issuer, audiences and
claim rules), the access log's fields, and the canary-abort and auth-failure rules run by
promtool (Prometheus's own rule evaluator) on recorded series."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import jwt
import numpy as np
import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric import rsa

from components.rollout_spec import CANARY_ALERT, RolloutPlan, rollout, split
from infra.config import parse_config
from infra.descriptor import OUTPUT as DESCRIPTOR
from infra.inference import rollout_plan
from infra.preview.report import kubernetes_objects
from tests.component.test_inference_service import GPU_PLAN
from tests.conftest import preview
from tests.unit.test_config import raw_stack
from tests.unit.test_inference_config import refused

NAMESPACE, MODEL = "inference", "gpt"


def rendered(stack: str, kind: str, name: str | None = None) -> dict:
    found = [m for m in kubernetes_objects(preview(stack)) if m["kind"] == kind
             and (name is None or m["metadata"]["name"] == name)]
    assert len(found) == 1, f"{stack}: {len(found)} {kind} {name or ''}"
    return found[0]


# --- the split -----------------------------------------------------------------------


def shares(route: dict) -> dict[str, float]:
    """Gateway API: each backend of a rule gets weight / (sum of the rule's weights) of its
    requests."""
    [rule] = route["spec"]["rules"]
    total = sum(b.get("weight", 1) for b in rule["backendRefs"])
    return {b["name"]: b.get("weight", 1) / total for b in rule["backendRefs"]}


def at_step(route: dict, canary_weight: int) -> dict:
    """The route as Argo's Gateway API plugin leaves it at a step: the canary Service's
    weight set, the stable's the rest."""
    moved = json.loads(json.dumps(route))
    for backend in moved["spec"]["rules"][0]["backendRefs"]:
        backend["weight"] = canary_weight if backend["name"].endswith("-canary") else 100 - canary_weight
    return moved


@pytest.mark.parametrize("kind", ["GRPCRoute", "HTTPRoute"])
def test_prods_routes_send_everything_to_the_stable_version_until_a_rollout_moves_them(kind):
    route = rendered("prod-cluster", kind)
    assert shares(route) == {"triton-stable": 1.0, "triton-canary": 0.0}
    [parent] = route["spec"]["parentRefs"]
    assert (parent["kind"], parent["name"]) == ("Gateway", "inference")
    # The services the route names are the ones the Rollout moves between.
    canary = rendered("prod-cluster", "Rollout")["spec"]["strategy"]["canary"]
    assert {b["name"] for b in route["spec"]["rules"][0]["backendRefs"]} == {canary["stableService"],
                                                                           canary["canaryService"]}
    plugin = canary["trafficRouting"]["plugins"]["argoproj-labs/gatewayAPI"]
    assert route["metadata"]["name"] in {r["name"] for r in plugin["grpcRoutes"] + plugin["httpRoutes"]}
    assert plugin["namespace"] == route["metadata"]["namespace"] == NAMESPACE


def test_prods_canary_takes_10_then_25_then_50_percent_then_all():
    route = rendered("prod-cluster", "GRPCRoute")
    steps = rendered("prod-cluster", "Rollout")["spec"]["strategy"]["canary"]["steps"]
    weights = [step["setWeight"] for step in steps if "setWeight" in step]
    assert [shares(at_step(route, w))["triton-canary"] for w in weights] == [0.10, 0.25, 0.50]
    # Each step is held ten minutes while the analysis runs, then the next one; after the
    # last, the canary is promoted (all traffic).
    assert [step["pause"] for step in steps if "pause" in step] == [{"duration": "10m"}] * 3


def test_an_ab_test_holds_its_split_until_someone_promotes_or_aborts():
    raw = raw_stack("prod")
    raw["mlplat:inference"]["rollout"] = {"strategy": "ab", "weights": {"stable": 70, "canary": 30}}
    config = parse_config(raw, "stacks/Pulumi.prod.yaml", from_stack_file=True)
    plan = rollout_plan(GPU_PLAN, config.inference)
    steps = rollout(plan)["spec"]["strategy"]["canary"]["steps"]
    assert steps == [{"setWeight": 30}, {"pause": {}}]  # no duration: held
    route = at_step(rendered("prod-cluster", "GRPCRoute"), steps[0]["setWeight"])
    assert shares(route) == {"triton-stable": 0.7, "triton-canary": 0.3}
    assert split(plan, 0) == {"stable": 70, "canary": 30}


def test_the_rollout_runs_the_deployments_template_and_aborts_on_the_alert():
    spec = rendered("prod-cluster", "Rollout")["spec"]
    assert spec["workloadRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "triton",
                                   "scaleDown": "progressively"}
    assert rendered("prod-cluster", "Deployment", "triton")["spec"]["replicas"] == 0
    canary = spec["strategy"]["canary"]
    assert canary["canaryMetadata"] == {"labels": {"mlplat.io/variant": "canary"}}
    assert canary["stableMetadata"] == {"labels": {"mlplat.io/variant": "stable"}}
    [template] = canary["analysis"]["templates"]
    analysis = rendered("prod-cluster", "AnalysisTemplate", template["templateName"])
    [metric] = analysis["spec"]["metrics"]
    assert metric["failureLimit"] == 0 and metric["successCondition"] == "result[0] == 0"
    query = metric["provider"]["prometheus"]["query"]
    # The analysis asks for the alert the PrometheusRule defines, for this model.
    rules = rendered("prod-cluster", "PrometheusRule", "triton-variants")
    alerts = {r["alert"] for g in rules["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert CANARY_ALERT in alerts and f'alertname="{CANARY_ALERT}"' in query
    assert f'namespace="{NAMESPACE}"' in query and f'model="{MODEL}"' in query
    # Every Triton series carries the pod's role.
    monitor = rendered("prod-cluster", "PodMonitor", "triton")
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["relabelings"] == [{"sourceLabels": ["__meta_kubernetes_pod_label_mlplat_io_variant"],
                                        "targetLabel": "variant", "action": "replace"}]


# --- who the gateway lets through -----------------------------------------------------------


KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def jwks() -> dict:
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(KEY.public_key()))
    return {"keys": [{**public, "kid": "platform", "alg": "RS256", "use": "sig"}]}


def decide(policy: dict, authorization: str | None, keys: dict) -> int:
    """What the gateway answers a request, from the rendered SecurityPolicy alone: 401 when
    the JWT filter refuses (no token, a bad signature, another issuer or audience, expired
    or not yet valid), 403 when the authorization rules refuse, 200 when it passes."""
    spec = policy["spec"]
    [provider] = spec["jwt"]["providers"]
    if not spec["jwt"].get("optional", False) and authorization is None:
        return 401
    token = (authorization or "").removeprefix("Bearer ")
    try:
        key = jwt.PyJWKSet.from_dict(keys)[jwt.get_unverified_header(token)["kid"]]
        claims = jwt.decode(token, key.key, algorithms=["RS256"], issuer=provider["issuer"],
                            audience=provider["audiences"], options={"require": ["exp", "iss", "aud"]})
    except (jwt.PyJWTError, KeyError):
        return 401
    for rule in spec["authorization"]["rules"]:
        wanted = rule["principal"]["jwt"]
        assert wanted["provider"] == provider["name"]
        if all(_claim_matches(claims, c) for c in wanted["claims"]):
            return 200 if rule["action"] == "Allow" else 403
    return 200 if spec["authorization"]["defaultAction"] == "Allow" else 403


def _claim_matches(claims: dict, rule: dict) -> bool:
    value: object = claims
    for part in rule["name"].split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if rule.get("valueType", "String") == "StringArray":
        return isinstance(value, list) and bool(set(value) & set(rule["values"]))
    return isinstance(value, str) and value in rule["values"]


def token(tenant: str | None = "serving", *, key=KEY, expires_in: int = 300, **overrides) -> str:
    auth = raw_stack("prod")["mlplat:inference"]["auth"]
    now = int(time.time())
    claims = {"iss": auth["issuer"], "aud": auth["audiences"][0], "sub": "svc-recommender", "iat": now,
              "exp": now + expires_in, **({"tenant": tenant} if tenant else {}), **overrides}
    return "Bearer " + jwt.encode(claims, key, algorithm="RS256", headers={"kid": "platform"})


def test_the_gateway_authenticates_every_request_and_lets_only_the_models_tenants_through():
    policy = rendered("prod-cluster", "SecurityPolicy")
    # It guards the Gateway itself: every route behind it.
    assert policy["spec"]["targetRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                             "name": "inference"}]
    keys = jwks()
    assert decide(policy, token("serving"), keys) == 200
    assert decide(policy, token("applied"), keys) == 200
    assert decide(policy, None, keys) == 401  # no token
    assert decide(policy, token("research"), keys) == 403  # a tenant of the platform, not of this model
    assert decide(policy, token(None), keys) == 403  # no tenant at all
    assert decide(policy, token(expires_in=-60), keys) == 401  # expired a minute ago
    assert decide(policy, token(key=OTHER_KEY), keys) == 401  # signed by someone else
    assert decide(policy, token(iss="https://login.example.com/realms/other"), keys) == 401
    assert decide(policy, token(aud="another-api"), keys) == 401


def test_the_policy_names_the_stacks_identity_provider():
    auth = raw_stack("prod")["mlplat:inference"]["auth"]
    [provider] = rendered("prod-cluster", "SecurityPolicy")["spec"]["jwt"]["providers"]
    assert (provider["issuer"], provider["audiences"], provider["remoteJWKS"]["uri"]) == (
        auth["issuer"], auth["audiences"], auth["jwksUri"])


def test_the_access_log_holds_no_token_and_no_body():
    proxy = rendered("prod-cluster", "EnvoyProxy")
    [setting] = proxy["spec"]["telemetry"]["accessLog"]["settings"]
    fields = setting["format"]["json"]
    operators = " ".join(fields.values())
    # Of the request's headers only the method, path and request id; never Authorization.
    assert set(re.findall(r"%REQ\(([^)]*)\)%", operators)) == {
        ":METHOD", "X-ENVOY-ORIGINAL-PATH?:PATH", "X-REQUEST-ID"}
    assert "AUTHORIZATION" not in operators.upper() and "BODY" not in operators.upper()
    # The Gateway's proxies are the only way to Triton: its pods admit nothing else.
    [gateway] = rendered("prod-cluster", "NetworkPolicy", "allow-gateway")["spec"]["ingress"]
    assert [source["namespaceSelector"]["matchLabels"] for source in gateway["from"]] == [
        {"kubernetes.io/metadata.name": "envoy-gateway-system"}]


# --- the rules, run by promtool on recorded series -------------------------------------------


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool not found: install Prometheus's tools (Debian/Ubuntu: sudo apt-get install "
                    "prometheus), as `make services` does", pytrace=False)
    return found


def counters(rate: float, error_ratio: float, minutes: int, seed: int, scrape_s: int = 15) -> tuple[str, str]:
    """Cumulative success and failure counters of one pod, scraped every `scrape_s`: Poisson
    arrivals at `rate` per second, each failing with probability `error_ratio`."""
    rng = np.random.default_rng(seed)
    arrivals = rng.poisson(rate * scrape_s, minutes * 60 // scrape_s)
    failures = rng.binomial(arrivals, error_ratio)
    ok, bad = np.cumsum(arrivals - failures), np.cumsum(failures)
    return " ".join(map(str, ok)), " ".join(map(str, bad))


def series(variant: str, rate: float, error_ratio: float, p99_us: float, minutes: int, seed: int) -> list[dict]:
    labels = f'namespace="{NAMESPACE}",model="{MODEL}",version="{7 if variant == "canary" else 6}",' \
             f'pod="triton-{variant}-0",variant="{variant}"'
    ok, bad = counters(rate, error_ratio, minutes, seed)
    jitter = np.random.default_rng(seed + 1).normal(1.0, 0.1, minutes * 4)
    p99 = " ".join(str(round(p99_us * j)) for j in jitter)
    return [{"series": f"nv_inference_request_success{{{labels}}}", "values": ok},
            {"series": f"nv_inference_request_failure{{{labels}}}", "values": bad},
            {"series": f'nv_inference_request_summary_us{{{labels},quantile="0.99"}}', "values": p99}]


def run_rules(tmp_path: Path, rule: dict, input_series: list[dict], tests: dict) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule["spec"]))
    suite = {"rule_files": ["rules.yaml"], "evaluation_interval": "30s",
             "tests": [{"interval": "15s", "input_series": input_series, **tests}]}
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(suite, sort_keys=False))
    done = subprocess.run([promtool(), "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


FIRED = {"alertname": CANARY_ALERT, "alertstate": "firing", "severity": "critical", "component": "inference",
         "namespace": NAMESPACE, "model": MODEL}


def fired_by(minute: int, *, ever: bool) -> dict:
    """Whether the abort alert fired at any evaluation up to `minute` (promtool keeps the
    ALERTS series of every evaluation): an abort happens the first time it does."""
    labels = ",".join(f'{k}="{v}"' for k, v in FIRED.items())
    return {"promql_expr_test": [{
        "expr": f'max_over_time(ALERTS{{alertname="{CANARY_ALERT}",alertstate="firing"}}[{minute}m])',
        "eval_time": f"{minute}m",
        "exp_samples": [{"labels": f"{{{labels}}}", "value": 1}] if ever else []}]}


# The canary takes a tenth of prod's traffic: 18 requests a second to the stable, 2 to the
# canary, 1% of them failing on a healthy version.
STABLE_RATE, CANARY_RATE, HEALTHY_ERRORS, P99_US = 18.0, 2.0, 0.01, 40_000


def abort_window() -> int:
    return rollout_plan(GPU_PLAN, parse_config(raw_stack("prod"), "stacks/Pulumi.prod.yaml",
                                               from_stack_file=True).inference).abort.window_minutes


@pytest.mark.parametrize("seed", range(3))
def test_the_canary_is_aborted_when_its_error_rate_is_three_times_the_stables(tmp_path, seed):
    rule = rendered("prod-cluster", "PrometheusRule", "triton-variants")
    window = abort_window()
    inputs = series("stable", STABLE_RATE, HEALTHY_ERRORS, P99_US, 2 * window + 10, seed=10 + seed) + \
        series("canary", CANARY_RATE, 3 * HEALTHY_ERRORS, P99_US, 2 * window + 10, seed=20 + seed)
    # Within a few minutes of a full window of the canary's traffic.
    run_rules(tmp_path, rule, inputs, fired_by(window + 5, ever=True))


def test_the_canary_is_aborted_when_its_p99_is_twice_the_stables(tmp_path):
    rule = rendered("prod-cluster", "PrometheusRule", "triton-variants")
    window = abort_window()
    inputs = series("stable", STABLE_RATE, HEALTHY_ERRORS, P99_US, 2 * window + 10, seed=3) + \
        series("canary", CANARY_RATE, HEALTHY_ERRORS, 2 * P99_US, 2 * window + 10, seed=4)
    run_rules(tmp_path, rule, inputs, fired_by(window + 5, ever=True))


@pytest.mark.parametrize("seed", range(5))
def test_a_noisy_but_healthy_canary_is_never_aborted(tmp_path, seed):
    """Two hours of the same healthy traffic on both, every evaluation looked at: Poisson
    arrivals and errors, and p99 jittering by 10% from scrape to scrape."""
    rule = rendered("prod-cluster", "PrometheusRule", "triton-variants")
    inputs = series("stable", STABLE_RATE, HEALTHY_ERRORS, P99_US, 120, seed=100 + seed) + \
        series("canary", CANARY_RATE, HEALTHY_ERRORS, P99_US, 120, seed=200 + seed)
    run_rules(tmp_path, rule, inputs, fired_by(119, ever=False))


def test_too_little_canary_traffic_aborts_nothing(tmp_path):
    """A canary that takes next to no requests says nothing about its error rate."""
    rule = rendered("prod-cluster", "PrometheusRule", "triton-variants")
    inputs = series("stable", STABLE_RATE, HEALTHY_ERRORS, P99_US, 40, seed=5) + \
        series("canary", 0.1, 0.5, P99_US, 40, seed=6)
    run_rules(tmp_path, rule, inputs, fired_by(39, ever=False))


def test_requests_the_gateway_refuses_are_counted(tmp_path):
    rule = rendered("prod-cluster", "PrometheusRule", "triton-auth")
    labels = f'namespace="{NAMESPACE}",pod="envoy-inference-0"'
    # Two refused tokens a second for half an hour, no refused tenant: the alert fires
    # after its ten minutes.
    refused = " ".join(str(2 * 15 * i) for i in range(120))
    none = " ".join("0" for _ in range(120))
    inputs = [{"series": f"envoy_http_jwt_authn_denied{{{labels}}}", "values": refused},
              {"series": f"envoy_http_rbac_denied{{{labels}}}", "values": none}]
    [alert] = [r for g in rule["spec"]["groups"] for r in g["rules"] if r.get("alert") == "InferenceAuthFailures"]
    run_rules(tmp_path, rule, inputs, {
        "alert_rule_test": [
            {"eval_time": "25m", "alertname": "InferenceAuthFailures", "exp_alerts": [{"exp_labels": {
                "severity": "warning", "component": "inference", "namespace": NAMESPACE},
                "exp_annotations": alert["annotations"]}]},
            {"eval_time": "5m", "alertname": "InferenceAuthFailures", "exp_alerts": []}],
        "promql_expr_test": [{"expr": "mlplat:inference_auth_refused:rate5m", "eval_time": "20m", "exp_samples": [
            {"labels": f'mlplat:inference_auth_refused:rate5m{{namespace="{NAMESPACE}",reason="token"}}', "value": 2},
            {"labels": f'mlplat:inference_auth_refused:rate5m{{namespace="{NAMESPACE}",reason="tenant"}}',
             "value": 0}]}]})


def test_the_plan_the_stack_resolves_is_what_the_rule_holds():
    plan: RolloutPlan = rollout_plan(GPU_PLAN, parse_config(
        raw_stack("prod"), "stacks/Pulumi.prod.yaml", from_stack_file=True).inference)
    assert (plan.abort.error_ratio, plan.abort.p99_ratio, plan.abort.window_minutes) == (2.0, 1.5, 10)
    rule = rendered("prod-cluster", "PrometheusRule", "triton-variants")
    text = json.dumps(rule)
    assert "* 2.0, 0.01)" in text and "* 1.5)" in text and "[10m]" in text


# --- request logging ---------------------------------------------------------------------


@pytest.mark.parametrize("kind, port", [("GRPCRoute", 8001), ("HTTPRoute", 8000)])
def test_the_routes_mirror_the_configured_sample_to_the_request_logger(kind, port):
    logging = parse_config(raw_stack("prod"), "stacks/Pulumi.prod.yaml", from_stack_file=True).inference.request_logging
    [rule] = rendered("prod-cluster", kind)["spec"]["rules"]
    [mirror] = [f["requestMirror"] for f in rule["filters"] if f["type"] == "RequestMirror"]
    fraction = mirror["fraction"]["numerator"] / mirror["fraction"].get("denominator", 100) if "fraction" in mirror \
        else mirror["percent"] / 100
    assert fraction == logging.sample_percent / 100
    assert mirror["backendRef"] == {"group": "", "kind": "Service", "name": "request-logger", "port": port}
    logger = rendered("prod-cluster", "Service", "request-logger")
    assert port in {p["port"] for p in logger["spec"]["ports"]}


def test_the_logger_drops_personal_fields_and_writes_under_the_datasets_key():
    [container] = rendered("prod-cluster", "Deployment", "request-logger")["spec"]["template"]["spec"]["containers"]
    command = container["command"]
    assert command[:4] == ["python", "-m", "workloads.monitor", "log-requests"]
    assert "--allow-personal" not in command
    assert command[command.index("--field") + 1] == "input_ids=personal"
    assert command[command.index("--prefix") + 1] == "request-logs"
    descriptor = preview("prod").stack_outputs[DESCRIPTOR]
    assert command[command.index("--bucket") + 1] == descriptor["buckets"]["datasets"]
    assert command[command.index("--kms-key") + 1] == descriptor["keys"]["datasets"]
    # The tenant reaches it from the token, as a header the gateway sets.
    [provider] = rendered("prod-cluster", "SecurityPolicy")["spec"]["jwt"]["providers"]
    assert provider["claimToHeaders"] == [{"claim": "tenant", "header": "x-mlplat-tenant"}]


def test_the_logger_is_told_to_stop_before_the_kubelet_kills_it():
    """What the pod holds is written, or said lost, before SIGKILL: the rendered command, as the
    logger's own parser reads it, stops sooner than the pod's grace period."""
    from workloads.monitor.cli import parser

    pod = rendered("prod-cluster", "Deployment", "request-logger")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert "--stop-within" in container["command"]  # set from the pod's own grace period, not left to a default
    args = parser().parse_args(container["command"][3:])
    assert 0 < args.stop_within <= pod["terminationGracePeriodSeconds"] - 5


def test_request_logs_are_kept_only_as_long_as_the_stack_says():
    days = parse_config(raw_stack("prod"), "stacks/Pulumi.prod.yaml",
                        from_stack_file=True).inference.request_logging.retention_days
    [lifecycle] = [r.inputs() for r in preview("prod").registrations
                   if r.type == "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration"
                   and r.name == "datasets"]
    [rule] = [r for r in lifecycle["rules"] if r["filter"]["prefix"] == "request-logs/gpt/"]
    assert rule["expiration"] == {"days": days} and rule["noncurrentVersionExpiration"] == {"noncurrentDays": 1}


@pytest.mark.parametrize("logging, message", [
    ({"samplePercent": 0.001}, "samplePercent: 0.001: Input should be greater than or equal to 0.01"),
    ({"samplePercent": 150}, "samplePercent: 150: Input should be less than or equal to 100"),
    ({"fields": {"prompt": "personal"}}, "fields: ['prompt'] does not mark input_ids, the model's input"),
    ({"fields": {"input_ids": "secret"}}, "fields.input_ids: 'secret' is not allowed; allowed: 'personal' or 'plain'"),
])
def test_request_logging_settings_that_cannot_apply_are_refused(logging, message):
    assert refused("prod", requestLogging=logging).startswith(
        f"stacks/Pulumi.prod.yaml: mlplat:inference.requestLogging.{message}")


def test_a_fraction_of_a_percent_is_mirrored_as_a_fraction():
    from components.request_log_spec import RequestLogPlan, mirror_filter

    plan = RequestLogPlan(serving=GPU_PLAN, image="i", bucket="b", kms_key_arn="k", sample_percent=0.5,
                          fields=(("input_ids", "personal"),))
    assert mirror_filter(plan, 8001)["requestMirror"]["fraction"] == {"numerator": 50, "denominator": 10000}


# --- the scheduled drift check --------------------------------------------------------------


def test_prods_drift_check_runs_beside_the_model_as_its_tenant_reading_the_lineage():
    """In the serving namespace, where no tenant may run a pod (a tenant's developers hold
    whatever a pod in their namespace holds); it signs in as the model's tenant."""
    job = rendered("prod-cluster", "CronJob", "model-drift-gpt")
    everything = kubernetes_objects(preview("prod-cluster"))
    [namespace] = [m for m in everything if m["kind"] == "Namespace" and m["metadata"]["name"] == "inference"]
    assert job["metadata"]["namespace"] == "inference"
    assert "mlplat.io/tenant" not in namespace["metadata"]["labels"]
    assert not [b for b in everything if b["kind"] == "RoleBinding" and b["metadata"]["namespace"] == "inference"
                and any(s.get("kind") == "Group" for s in b.get("subjects", []))]  # no tenant's group binds here
    template = job["spec"]["jobTemplate"]
    assert "kueue.x-k8s.io/queue-name" not in template["metadata"].get("labels", {})
    [container] = template["spec"]["template"]["spec"]["containers"]
    command = container["command"]
    assert command[:4] == ["python", "-m", "workloads.monitor", "drift-job"]
    settings = parse_config(raw_stack("prod"), "stacks/Pulumi.prod.yaml", from_stack_file=True).inference
    assert command[command.index("--version") + 1] == str(settings.version)
    assert command[command.index("--registered-model") + 1] == settings.drift.registered_model
    descriptor = preview("prod").stack_outputs[DESCRIPTOR]
    assert command[command.index("--logs") + 1] == f"s3://{descriptor['buckets']['datasets']}/request-logs/gpt/"
    # prod trains from Lustre: the check reads the same files from the bucket Lustre mirrors.
    assert descriptor["lustre"] is not None
    assert command[command.index("--lustre-datasets") + 1] == \
        f"/fsx/datasets/=s3://{descriptor['buckets']['datasets']}/serving/"  # the tenant's own prefix
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["MLFLOW_TRACKING_USERNAME"] == "serving" and env["MLPLAT_TRACKING_SECRET_ARN"]
    # It pushes to the Pushgateway, which Prometheus scrapes under its own job and instance,
    # keeping the model, version and column the check pushed (tests/stack/test_platform_ingress.py).
    gateway = command[command.index("--pushgateway") + 1]
    assert gateway == "http://pushgateway.monitoring.svc.cluster.local:9091"
    monitor = rendered("prod-cluster", "ServiceMonitor", "pushgateway")
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is False


def test_the_drift_alert_fires_on_two_drifted_checks_in_a_row_and_when_checks_stop(tmp_path):
    rule = rendered("prod-cluster", "PrometheusRule", "model-drift-gpt")
    day = 24 * 60  # minutes
    # As Prometheus stores them: the Pushgateway's job and instance, the pushed job kept apart.
    labels = 'model="gpt",version="1",job="pushgateway",instance="10.0.3.7:9091",exported_job="model-drift",' \
             'exported_instance=""'
    # Pushed every day; the Pushgateway holds each value until the next push. One column is
    # found drifted by the second and third checks; another by the second check alone (one
    # noisy run, which must not page anyone); the checks stop after the third push.
    inputs = [
        {"series": f'mlplat_model_input_drifted{{{labels},column="mean_token_id"}}',
         "values": f"0x{day} 1x{2 * day}"},
        {"series": f'mlplat_model_input_drifted{{{labels},column="std_token_id"}}',
         "values": f"0x{day} 1x{day} 0x{day}"},
        {"series": f"mlplat_model_drift_check_timestamp_seconds{{{labels}}}",
         # The Pushgateway keeps serving the last push after the checks stop.
         "values": f"0x{day} {day * 60}x{day} {2 * day * 60}x{4 * day}"},
    ]
    [drift, stale] = rule["spec"]["groups"][0]["rules"]
    checks = [
        {"eval_time": "12h", "alertname": "ModelInputDrift", "exp_alerts": []},
        {"eval_time": "36h", "alertname": "ModelInputDrift", "exp_alerts": []},  # one drifted check so far
        {"eval_time": "47h", "alertname": "ModelInputDrift", "exp_alerts": []},
        {"eval_time": "50h", "alertname": "ModelInputDrift", "exp_alerts": [{
            "exp_labels": {"severity": "warning", "component": "drift", "model": "gpt", "version": "1",
                           "column": "mean_token_id"},
            "exp_annotations": {"summary": "The requests to gpt drifted from its training data",
                                "description": drift["annotations"]["description"]
                                .replace("{{ $labels.column }}", "mean_token_id")
                                .replace("{{ $labels.version }}", "1")}}]},
        {"eval_time": "36h", "alertname": "ModelDriftCheckMissing", "exp_alerts": []},
        # The last push was at 48 h: two daily runs later (72 h after it) the check is missing.
        {"eval_time": "110h", "alertname": "ModelDriftCheckMissing", "exp_alerts": []},
        {"eval_time": "125h", "alertname": "ModelDriftCheckMissing", "exp_alerts": [{
            "exp_labels": {"severity": "warning", "component": "drift", "model": "gpt"},
            "exp_annotations": stale["annotations"]}]},
    ]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule["spec"]))
    suite = {"rule_files": ["rules.yaml"], "evaluation_interval": "5m",
             "tests": [{"interval": "1m", "input_series": inputs, "alert_rule_test": checks}]}
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(suite, sort_keys=False))
    done = subprocess.run([promtool(), "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert stale["for"] == "15m" and "absent(" in stale["expr"] and "> 259200" in stale["expr"]


@pytest.mark.parametrize("drift, message", [
    ({"enabled": True}, "drift.registeredModel: is required with enabled: true"),
    ({"enabled": True, "registeredModel": "serving-gpt", "tenant": "research"},
     "drift.tenant: 'research' is not one of the model's tenants (applied, serving)"),
])
def test_drift_settings_that_cannot_run_are_refused(drift, message):
    assert refused("prod", drift=drift).startswith(f"stacks/Pulumi.prod.yaml: mlplat:inference.{message}")


def test_a_drift_check_needs_a_pinned_version():
    from infra.config import ConfigError

    raw = raw_stack("prod")
    del raw["mlplat:inference"]["version"]
    with pytest.raises(ConfigError, match=r"mlplat:inference.drift.enabled: the drift check compares the served "
                                          r"version with its own training data: pin it with mlplat:inference.version"):
        parse_config(raw, "stacks/Pulumi.prod.yaml", from_stack_file=True)


def test_where_outputs_are_logged_envoy_streams_requests_and_answers_to_the_logger_off_the_path():
    """smb keeps the model's answers too: Envoy's ext_proc in shadow mode on both routes,
    failing open, instead of a mirror; the logger samples."""
    policy = rendered("smb-cluster", "EnvoyExtensionPolicy")
    assert {(t["kind"], t["name"]) for t in policy["spec"]["targetRefs"]} == {("GRPCRoute", "triton"),
                                                                              ("HTTPRoute", "triton")}
    [ext] = policy["spec"]["extProc"]
    assert ext["shadowMode"] is True and ext["failOpen"] is True
    assert ext["backendRefs"] == [{"group": "", "kind": "Service", "name": "request-logger", "port": 9002}]
    for kind in ("GRPCRoute", "HTTPRoute"):
        [rule] = rendered("smb-cluster", kind)["spec"]["rules"]
        assert "filters" not in rule  # no mirror: the stream already carries the request
    [container] = rendered("smb-cluster", "Deployment", "request-logger")["spec"]["template"]["spec"]["containers"]
    command = container["command"]
    assert command[command.index("--ext-proc-port") + 1] == "9002"
    assert command[command.index("--sample-percent") + 1] == "5"
    assert {"--field", "top_k_ids=plain"} <= set(command) and "input_ids=personal" in command
    # prod mirrors requests only.
    assert [m for m in kubernetes_objects(preview("prod-cluster")) if m["kind"] == "EnvoyExtensionPolicy"] == []


def test_a_field_the_model_does_not_have_is_refused():
    assert refused("prod", requestLogging={"fields": {"input_ids": "personal", "user_email": "personal"}}) == ("stacks/Pulumi.prod.yaml: mlplat:inference.requestLogging.fields: user_email is not an "
                              "input or output of the served model; known: input_ids, logits, top_k_ids, "
                              "top_k_logprobs")


def test_the_logger_reads_only_the_tenant_the_gateway_set_from_the_token():
    """The header the logger reads is the one the SecurityPolicy sets from the token's
    claim, and a client's copy is removed as the request arrives, before that filter runs
    (Envoy Gateway's earlyRequestHeaders), on the Gateway every route hangs from."""
    from workloads.monitor.logger import TENANT_HEADER as LOGGER_READS

    gateway = rendered("prod-cluster", "Gateway")
    policy = rendered("prod-cluster", "SecurityPolicy")
    headers = rendered("prod-cluster", "ClientTrafficPolicy")
    set_from_token = {c["header"].lower() for p in policy["spec"]["jwt"]["providers"] for c in p["claimToHeaders"]}
    assert set_from_token == {LOGGER_READS}
    assert headers["metadata"]["namespace"] == gateway["metadata"]["namespace"]
    assert headers["spec"]["targetRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                               "name": gateway["metadata"]["name"]}]
    early = headers["spec"]["headers"]["earlyRequestHeaders"]
    assert {h.lower() for h in early["remove"]} >= set_from_token
    assert not early.get("set") and not early.get("add")
    # Every route reaches the backends through this Gateway alone.
    for kind in ("GRPCRoute", "HTTPRoute"):
        route = rendered("prod-cluster", kind)
        assert {p["name"] for p in route["spec"]["parentRefs"]} == {gateway["metadata"]["name"]}
