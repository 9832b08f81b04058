"""One rendered release judged as the cluster and the registry will judge it.

`findings` gathers, for a release rendered as it will be applied, one line per problem,
each naming the release, the object, the field and the rule broken:
- what the API server refuses (admission.py: its own rules, CRD schemas and CEL);
- an image that is not an in-region mirror of the registry plan;
- a mirror that is not the image the pinned chart runs at that place (the release is
  rendered again without our image overrides to see the chart's own choice).
"""

from __future__ import annotations

from dataclasses import replace

from infra.checks.admission import refusals
from infra.checks.images import drift, object_id, out_of_plan, pulled_references, without_images
from infra.render import Rendered, render


def findings(rendered: Rendered, account: str, region: str, environment: str,
             registry: str | None = None) -> list[str]:
    """`registry`: the environment's registry host where it is not the account's ECR."""
    release = f"release {rendered.release.name}"
    lines = refusals([(release, obj) for obj in rendered.objects])
    pulled = [(f"{object_id(obj)}: {where}", ref) for obj in rendered.objects
              if obj.get("kind") != "CustomResourceDefinition" for where, ref in pulled_references(obj)]
    lines += [f"{release}: {line}" for line in out_of_plan(pulled, account, region, environment, registry)]
    spec = rendered.release
    upstream = render(replace(spec, values=without_images(spec.values)))
    lines += [f"{release}: {d}" for d in drift(rendered.objects, upstream.objects, account, region, environment, registry)]
    return lines
