"""What the API server would refuse, for every Kubernetes object a stack applies.

`refusals` runs the API server's own rules (apiserver.py) on every object, judges every
custom resource against its CRD (crd_schema.py): the CRDs the stack's charts install, then
those in the CRD folder for kinds no chart brings; and runs the stack's own admission
policies over the pods its workloads would create (admission_policy.py). The preview reports each
refusal as an engine error, because a real `pulumi up` would fail on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from infra.checks.admission_policy import pod_refusals
from infra.checks.apiserver import Problem, object_label, problems
from infra.checks.crd_schema import CrdIndex, Outcome, is_custom, load_crd_files, validate
from infra.chart_cache import shared_folder
from infra.versions import KUBERNETES_VERSION, SERVED_APIS

# CRDs of kinds that the platform creates but no chart of its own installs.
CRD_FOLDER = shared_folder("crds")


def crd_index(objects: Sequence[Mapping[str, Any]], fallback: Path | None = CRD_FOLDER) -> CrdIndex:
    installed = [o for o in objects if o.get("kind") == "CustomResourceDefinition"]
    index = CrdIndex.of(installed)
    missing = any(is_custom(o) and index.schema_for(o)[1] is None for o in objects
                  if o.get("kind") != "CustomResourceDefinition")
    if missing and fallback is not None and fallback.is_dir():
        index = CrdIndex.of([*load_crd_files(fallback), *installed])  # the stack's own CRDs win
    return index


def refusals(objects: Sequence[tuple[str, Mapping[str, Any]]], outcome: Outcome | None = None) -> list[str]:
    """One line per refusal, `<owner>: <object>: <field>: <message> (<rule>)`; `objects`
    are (owner, object) pairs, the owner a release name or `program`."""
    outcome = outcome if outcome is not None else Outcome()
    index = crd_index([obj for _owner, obj in objects])
    lines = []
    for owner, obj in objects:
        found: list[Problem] = problems(obj)
        api_version, kind = str(obj.get("apiVersion")), str(obj.get("kind"))
        if not is_custom(obj) and kind not in SERVED_APIS.get(api_version, ()):
            found.append(Problem(object_label(obj), "apiVersion", "API discovery",
                                 f"no matches for kind {kind!r} in version {api_version!r}: a "
                                 f"{KUBERNETES_VERSION} cluster does not serve it"))
        if is_custom(obj) and obj.get("kind") != "CustomResourceDefinition":
            before = len(outcome.problems)
            validate(obj, index, outcome)
            found += outcome.problems[before:]
        lines += [f"{owner}: {problem}" for problem in found]
    # The stack's own ValidatingAdmissionPolicies, over the pods its workloads would make.
    return lines + pod_refusals(objects)
