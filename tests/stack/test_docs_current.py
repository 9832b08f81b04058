"""Generated documentation stays true to the program: the architecture pictures (one per
layer of prod) and the README's component reference (every stack of both layers) are
regenerated here and compared with what is committed."""

from __future__ import annotations

from pathlib import Path

from infra.preview.component_docs import END, START, reference
from infra.preview.diagram import architecture_markdown
import pytest

from tests.conftest import CLUSTER_STACKS, STACKS, preview

REPO = Path(__file__).resolve().parents[2]
# `mlplat docs` reads every stack in stacks/, of both layers, in this order.
ALL_STACKS = tuple(sorted(STACKS + CLUSTER_STACKS))


# The cloud layer's picture, and the cluster layer's.
PICTURES = {"prod": "architecture.md", "prod-cluster": "architecture-cluster.md"}


@pytest.mark.parametrize(("stack", "name"), PICTURES.items())
def test_architecture_picture_is_current(stack, name):
    committed = (REPO / "docs" / name).read_text()
    # Its header tells how to regenerate it into itself, never into the other layer's file.
    assert f"mlplat diagram --stack {stack} --output docs/{name}`" in committed
    assert committed == architecture_markdown(preview(stack)), (
        f"docs/{name} is stale: run `mlplat diagram --stack {stack} --output docs/{name}`"
    )


def test_readme_links_both_pictures():
    readme = (REPO / "README.md").read_text()
    for stack, name in PICTURES.items():
        assert f"(docs/{name})" in readme and f"mlplat diagram --stack {stack} --output docs/{name}" in readme


def test_readme_component_reference_is_current():
    readme = (REPO / "README.md").read_text()
    committed = START + readme.split(START, 1)[1].split(END, 1)[0] + END
    assert committed == reference([preview(stack) for stack in ALL_STACKS]), (
        "README.md's component reference is stale: run `mlplat docs`"
    )


def test_every_component_is_documented():
    readme = (REPO / "README.md").read_text()
    for result in (preview(stack) for stack in ALL_STACKS):
        for reg in result.registrations:
            if not reg.custom and reg.type.startswith("mlplat:"):
                assert f"### `{reg.type.rsplit(':', 1)[-1]}`" in readme, reg.type
