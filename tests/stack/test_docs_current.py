"""Generated documentation stays true to the program: the architecture picture and the
README's component reference are regenerated here and compared with what is committed."""

from __future__ import annotations

from pathlib import Path

from infra.preview.component_docs import END, START, reference
from infra.preview.diagram import architecture_markdown
from tests.conftest import STACKS, preview

REPO = Path(__file__).resolve().parents[2]


def test_architecture_picture_is_current():
    committed = (REPO / "docs" / "architecture.md").read_text()
    assert committed == architecture_markdown(preview("prod")), (
        "docs/architecture.md is stale: run `mlplat diagram --stack prod --output docs/architecture.md`"
    )


def test_readme_component_reference_is_current():
    readme = (REPO / "README.md").read_text()
    committed = START + readme.split(START, 1)[1].split(END, 1)[0] + END
    assert committed == reference([preview(stack) for stack in STACKS]), (
        "README.md's component reference is stale: run `mlplat docs`"
    )


def test_every_component_is_documented():
    readme = (REPO / "README.md").read_text()
    for result in (preview(stack) for stack in STACKS):
        for reg in result.registrations:
            if not reg.custom and reg.type.startswith("mlplat:"):
                assert f"### `{reg.type.rsplit(':', 1)[-1]}`" in readme, reg.type
