"""The `serving` image: what the registry plan names, pinned as the project pins it,
non-root, and copying sources that exist."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from infra.versions import IMAGES

REPO = Path(__file__).resolve().parents[3]
DOCKERFILE = REPO / "workloads" / "images" / "serving.Dockerfile"


def instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", "\n".join(line for line in DOCKERFILE.read_text().splitlines()
                                           if not line.lstrip().startswith("#")))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in text.splitlines() if line.strip()]


def test_the_registry_plan_builds_this_file():
    image = IMAGES["serving"]
    assert image.built_here and REPO / image.source == DOCKERFILE


def test_pins_match_the_project():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    pins = set(project["project"]["optional-dependencies"]["serve"])
    pins |= {d for d in project["project"]["dependencies"] if d.startswith("protobuf==")}
    [install] = [a for kind, a in instructions() if kind == "RUN" and "pip install" in a]
    packages = {w for w in install.split("pip install", 1)[1].split() if not w.startswith("-")}
    assert all("==" in p for p in packages)
    assert pins <= packages


def test_base_comes_from_the_build_and_user_is_not_root():
    assert ("ARG", "BASE_IMAGE") in instructions() and ("FROM", "${BASE_IMAGE}") in instructions()
    assert IMAGES["serving"].base == "pytorch"
    users = [a for kind, a in instructions() if kind == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")


def test_copied_sources_exist():
    for kind, a in instructions():
        if kind == "COPY":
            *sources, _ = a.split()
            for source in sources:
                assert (REPO / source).exists(), source
