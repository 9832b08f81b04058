"""The render check: every Helm release of every stack, in both device-plugin modes,
rendered by the real Helm engine as the Kubernetes provider's helm.v4.Chart applies it
(the cluster's Kubernetes version, the API versions the stack's charts serve, hooks
dropped, CRDs included, the program's transforms applied), then judged as the cluster and
the registry will judge it. The objects are those the offline preview registered, so
they are exactly what the policy pack judged too."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import cache
from typing import Any

import jsonschema
import pytest
from kubernetes_validate.utils import schema_contents
from referencing import Registry, Resource

from components.addons.charts import DROPPED_HOOKS
from components.addons.defaults import API_CLIENTS, with_stated_token_use
from infra.checks.admission import refusals
from infra.checks.apiserver import containers, pod_specs
from infra.checks.crd_schema import Outcome, is_custom
from infra.checks.images import inert, object_id, references
from infra.checks.release import findings
from infra.checks.values_read import ACCEPTED_UNREAD, leaves, unread
from infra.preview.charts import CHART_TYPE
from infra.preview.fixtures import ACCOUNT_ID
from infra.render import _load_chart, first_deploy_api_versions, locate, render
from infra.versions import KUBERNETES_VERSION
from tests.conftest import VARIANTS, preview, registry_of

IDS = [f"{stack}-{mode}" for stack, mode in VARIANTS]


@pytest.fixture(params=VARIANTS, ids=IDS)
def variant(request):
    return preview(*request.param)


def chart_objects(result) -> Iterator[tuple[str, dict]]:
    """(release, object) for every object a chart of the stack renders, as registered."""
    charts = {r.urn: r.name for r in result.registrations if r.type == CHART_TYPE}
    for reg in result.registrations:
        if reg.parent in charts and reg.custom:
            yield charts[reg.parent], reg.inputs(mask_secrets=False)


def renders(with_environment: bool = False):
    """Every distinct rendered release of every variant (stacks share most of them); with
    the environment whose registry it pulls from, when asked."""
    seen = {}
    for stack, mode in VARIANTS:
        for chart in preview(stack, mode).charts:
            key = chart.rendered.release.key(KUBERNETES_VERSION, ())
            seen.setdefault(key, (stack.removesuffix("-cluster"), chart.rendered))
    return list(seen.values()) if with_environment else [rendered for _, rendered in seen.values()]


def test_every_chart_renders_into_registered_objects(variant):
    charts = [r for r in variant.registrations if r.type == CHART_TYPE]
    assert charts and len(variant.charts) == len(charts)
    counts = {}
    for release, _obj in chart_objects(variant):
        counts[release] = counts.get(release, 0) + 1
    for chart in variant.charts:
        assert chart.rendered is not None, f"{chart.resource_name}: not rendered"
        assert counts.get(chart.resource_name) == len(chart.rendered.objects), chart.resource_name


def test_the_api_server_refuses_nothing(variant):
    charts = {r.urn for r in variant.registrations if r.type == CHART_TYPE}
    objects = [(f"release {release}", obj) for release, obj in chart_objects(variant)]
    objects += [("program", r.inputs(mask_secrets=False)) for r in variant.registrations
                if r.custom and r.type.startswith("kubernetes:") and r.parent not in charts and "kind" in r.inputs()]
    outcome = Outcome()
    assert refusals(objects, outcome) == []
    custom = [o for _owner, o in objects if is_custom(o) and o["kind"] != "CustomResourceDefinition"]
    assert custom, "every stack applies custom resources (Kueue queues at least)"
    # Every CEL rule on the way was evaluated; none was passed for want of a function.
    assert outcome.rules_skipped == []
    assert outcome.rules_evaluated > 0
    assert variant.engine_errors == []


@cache
def strict_validator(api_version: str, kind: str) -> Any:
    """kubernetes-validate's strict schema for one kind of the cluster's version, built once
    (its `validate` reads the whole definitions file on every call)."""
    schema_dir = f"kubernetes-json-schema/v{KUBERNETES_VERSION}.0-local-strict"
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema = schema_contents(f"{schema_dir}/{kind.lower()}-{group_version}.json", f"{KUBERNETES_VERSION}.0")
    definitions = schema_contents(f"{schema_dir}/_definitions.json", f"{KUBERNETES_VERSION}.0")
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def test_every_object_passes_kubernetes_validate_strict():
    """Each distinct built-in object of every variant, charts' and ours, against the
    Kubernetes version's OpenAPI schema (kubernetes-validate's) with unknown fields refused."""
    seen, errors = set(), []
    for stack, mode in VARIANTS:
        for reg in preview(stack, mode).registrations:
            if not reg.custom or not reg.type.startswith("kubernetes:") or reg.type == CHART_TYPE:
                continue
            obj = reg.inputs(mask_secrets=False)
            if "kind" not in obj or is_custom(obj):
                continue
            text = json.dumps(obj, sort_keys=True)
            if text in seen:
                continue
            seen.add(text)
            for err in strict_validator(obj["apiVersion"], obj["kind"]).iter_errors(obj):
                errors.append(f"{stack}-{mode} {object_id(obj)}: {'.'.join(map(str, err.path))}: {err.message}")
    assert len(seen) > 300
    assert errors == []


def test_every_release_passes_the_render_check():
    """In-region images from the plan, mirrors equal to what the pinned charts run, and
    nothing the API server refuses, release by release."""
    problems = [line for environment, rendered in renders(with_environment=True)
                for line in findings(rendered, ACCOUNT_ID, "me-central-1", environment, registry_of(environment))]
    assert problems == []


def test_inert_image_references_are_only_gpu_operator_operands_that_are_off():
    seen = {}
    for rendered in renders():
        for obj in rendered.objects:
            for where, ref in references(obj):
                reason = inert(obj, where)
                if reason:
                    seen[(rendered.release.chart, object_id(obj), where.split(".")[1])] = reason
    assert {chart for chart, _obj, _field in seen} == {"gpu-operator"}
    fields = {field for _chart, _obj, field in seen}
    assert fields >= {"driver", "toolkit", "dcgm", "gds", "gdrcopy", "sandboxDevicePlugin"}
    assert not fields & {"devicePlugin", "dcgmExporter", "validator", "gfd", "operator"}  # what runs


def test_every_chart_pod_says_whether_it_mounts_a_token():
    """The charts' pods that leave automountServiceAccountToken unset are exactly those the
    platform states as API clients (with why), and each of those is rendered by some stack."""
    unstated = {(obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])
                for rendered in renders() for obj in rendered.objects
                for _path, spec in pod_specs(obj) if "automountServiceAccountToken" not in spec}
    assert unstated == set(API_CLIENTS)
    assert all(len(reason) > 40 for reason in API_CLIENTS.values())
    for key in API_CLIENTS:
        obj = next(o for r in renders() for o in r.objects
                   if (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) == key)
        stated, changed = with_stated_token_use(obj)
        assert changed and all(spec["automountServiceAccountToken"] is True for _p, spec in pod_specs(stated))


def test_every_hook_pulumi_will_not_run_has_a_reason():
    hooks = {(r.release.chart, h.kind, h.name) for r in renders() for h in r.hooks}
    assert hooks - set(DROPPED_HOOKS) == set(), "a chart has a hook nobody has accepted losing"
    assert set(DROPPED_HOOKS) - hooks == set(), "stale DROPPED_HOOKS entries"
    assert all(len(reason) > 40 for reason in DROPPED_HOOKS.values())


def test_a_first_deploy_creates_the_objects_a_running_cluster_has():
    """On a new cluster the provider renders before any CRD exists; the objects must be
    the same, or a first `pulumi up` would leave some out."""
    for rendered in renders():
        first = render(rendered.release, KUBERNETES_VERSION, first_deploy_api_versions(rendered.release))
        assert [object_id(o) for o in first.objects] == [object_id(o) for o in rendered.objects], \
            rendered.release.name


def test_no_values_key_goes_unread():
    """Perturb every leaf of the values we pass, release by release; a leaf whose change
    alters nothing is a setting that does nothing. Each (chart, key) is proven once."""
    by_chart = {}
    for rendered in renders():
        by_chart.setdefault(rendered.release.chart, []).append(rendered.release)

    def unread_in(chart: str) -> list[str]:
        found, proven = [], set()
        defaults = _load_chart(locate(chart, by_chart[chart][0].version)).values
        for spec in by_chart[chart]:
            missing = unread(spec, defaults, skip=frozenset(proven))
            found += [f"{chart}: {path}" for path in missing if (chart, path) not in ACCEPTED_UNREAD]
            proven |= {p for p, _v in leaves(spec.values) if ".".join(p) not in missing}
        return sorted(set(found))

    with ThreadPoolExecutor(max_workers=2) as pool:  # Helm renders outside the GIL
        results = list(pool.map(unread_in, sorted(by_chart)))
    assert [line for lines in results for line in lines] == []
    passed = {(spec.chart, ".".join(p)) for specs in by_chart.values() for spec in specs for p, _v in leaves(spec.values)}
    assert set(ACCEPTED_UNREAD) <= passed, "stale ACCEPTED_UNREAD entries"


def test_chart_containers_all_have_limits(variant):
    missing = [f"{release}: {object_id(obj)} {c.get('name')}" for release, obj in chart_objects(variant)
               if obj.get("kind") != "CustomResourceDefinition"
               for c in _containers(obj) if not (c.get("resources") or {}).get("limits")]
    assert missing == []


def _containers(obj: dict) -> Iterator[dict]:
    for _path, spec in pod_specs(obj):
        for _where, container in containers(spec):
            yield container


def test_a_chart_version_changes_the_cache_key_and_nothing_else_does():
    rendered = renders()[0]
    spec = rendered.release
    assert spec.key(KUBERNETES_VERSION, ()) != replace(spec, version="0.0.1").key(KUBERNETES_VERSION, ())
    assert spec.key(KUBERNETES_VERSION, ()) == replace(spec, values=dict(spec.values)).key(KUBERNETES_VERSION, ())
    assert spec.key(KUBERNETES_VERSION, ()) != spec.key("1.33", ())


def test_the_certgen_job_the_platform_applies_is_the_charts_hook():
    """The provider drops Envoy Gateway's pre-install hook, so the platform applies the same
    Job itself (components/rollout_values.py): same command and arguments as the pinned
    chart renders with the stack's values, same environment, same Role, as it renders it."""
    from infra.render import load_documents, templates

    from components.rollout_values import ENVOY_GATEWAY_CHART, certgen_objects

    release = next(r.release for r in renders() if r.release.chart == ENVOY_GATEWAY_CHART)
    manifests, _ = templates(release)
    hooks = {(d["kind"], d["metadata"]["name"]): d for path, text in manifests.items() if "certgen" in path
             for d in load_documents(text) if isinstance(d, dict) and d}
    ours = {(o["kind"], o["metadata"]["name"]): o for o in certgen_objects("image")}
    assert set(ours) == set(hooks) == {(kind, "gateway-helm-certgen") for kind in
                                       ("ServiceAccount", "Role", "RoleBinding", "Job")}
    job, chart_job = ours[("Job", "gateway-helm-certgen")], hooks[("Job", "gateway-helm-certgen")]
    [mine], [theirs] = job["spec"]["template"]["spec"]["containers"], chart_job["spec"]["template"]["spec"]["containers"]
    assert mine["command"] == theirs["command"] and mine.get("args") == theirs.get("args")
    assert mine["env"] == theirs["env"]
    assert job["spec"]["template"]["spec"]["automountServiceAccountToken"] is True
    assert ours[("Role", "gateway-helm-certgen")]["rules"] == hooks[("Role", "gateway-helm-certgen")]["rules"]
    assert ours[("ServiceAccount", "gateway-helm-certgen")]["automountServiceAccountToken"] is False
    binding, chart_binding = ours[("RoleBinding", "gateway-helm-certgen")], hooks[("RoleBinding", "gateway-helm-certgen")]
    assert (binding["roleRef"], binding["subjects"]) == (chart_binding["roleRef"], chart_binding["subjects"])
