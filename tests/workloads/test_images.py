"""The workload Dockerfiles: pinned bases and versions, EFA without the kernel module,
non-root users, and COPY sources that exist."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from infra.versions import IMAGES, image_uri

REPO = Path(__file__).resolve().parents[2]
OURS = REPO / "workloads" / "images"
TRAINING, CHECKS = OURS / "training.Dockerfile", OURS / "checks.Dockerfile"
DOCKERFILES = [TRAINING, CHECKS]


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(l for l in path.read_text().splitlines() if not l.lstrip().startswith("#")))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in text.splitlines() if line.strip()]


def test_the_registry_plan_names_these_dockerfiles():
    built = {i.name: i.source for i in IMAGES.values() if i.built_here}
    assert built["training"] == "workloads/images/training.Dockerfile"
    assert built["checks"] == "workloads/images/checks.Dockerfile"
    assert {p.name for p in DOCKERFILES} >= {"training.Dockerfile", "checks.Dockerfile"}


@pytest.mark.parametrize("name", sorted(n for n, i in IMAGES.items() if i.built_here))
def test_every_platform_image_builds_on_a_pinned_in_region_mirror(name):
    """The Dockerfile takes its base only from the build (no default to fall back to
    upstream), and the build passes the plan's mirror of `base`, by digest."""
    image = IMAGES[name]
    steps = instructions(REPO / image.source)
    assert ("ARG", "BASE_IMAGE") in steps  # no `=default`
    assert [a for kind, a in steps if kind == "FROM"][0] == "${BASE_IMAGE}"
    base = image_uri(image.base, "111122223333", "me-central-1", "prod")
    assert not IMAGES[image.base].built_here
    assert re.fullmatch(rf"111122223333\.dkr\.ecr\.me-central-1\.amazonaws\.com/mlplat/prod/mirror/{image.base}:"
                        rf"{re.escape(IMAGES[image.base].tag)}@sha256:[0-9a-f]{{64}}", base)


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_runs_as_a_non_root_user(path):
    users = [a for kind, a in instructions(path) if kind == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_copied_sources_exist(path):
    for kind, a in instructions(path):
        if kind == "COPY":
            *sources, _dest = a.split()
            for source in sources:
                assert (REPO / source).exists(), source


# pip's install however it is called: `pip`, `pip3`, `pip3.11`, `python -m pip`, any spacing.
PIP_INSTALL = re.compile(r"(?:\bpip[0-9.]*|\bpython[0-9.]*\s+-m\s+pip)\s+install\b")


def pip_installs(path: Path) -> list[list[str]]:
    """The packages of each pip install a Dockerfile runs, in order (options left out)."""
    return [[w for w in re.split(r"&&|;|\|", rest)[0].split() if not w.startswith("-")]
            for kind, a in instructions(path) if kind == "RUN"
            for rest in PIP_INSTALL.split(a)[1:]]


def test_pip_installs_are_found_however_pip_is_called(tmp_path):
    path = tmp_path / "Dockerfile"
    path.write_text("FROM x\nRUN pip3 install a==1 && pip3.11 install --no-cache-dir b==2\n"
                    "RUN python3 -m pip  install c==3 ; echo\nRUN python -m pip install \\\n    d==4\nRUN pipx list\n")
    assert pip_installs(path) == [["a==1"], ["b==2"], ["c==3"], ["d==4"]]


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_pip_installs_are_pinned(path):
    for packages in pip_installs(path):
        assert packages and all("==" in p for p in packages), packages


@pytest.mark.parametrize("name", sorted(n for n, i in IMAGES.items() if i.built_here and i.base == "python"))
def test_images_on_the_python_base_replace_its_pip_setuptools_and_wheel_first(name):
    """The python base's own pip, setuptools and wheel carry advisories. Each image on it
    installs, before anything else, the versions every virtualenv of the tests gets (Makefile
    VENV_TOOLS), so that the audit of those virtualenvs stands for the image."""
    makefile = (REPO / "Makefile").read_text().splitlines()
    tools = next(line for line in makefile if line.startswith("VENV_TOOLS ")).split(":=", 1)[1].split()
    installs = pip_installs(REPO / IMAGES[name].source)
    assert len(installs) > 1, name
    assert sorted(installs[0]) == sorted(tools) and {t.split("==")[0] for t in tools} == {"pip", "setuptools"}
    # The base's wheel goes, in the same step: the virtualenvs, made by the venv module, have none.
    first = next(a for kind, a in instructions(REPO / IMAGES[name].source) if kind == "RUN" and PIP_INSTALL.search(a))
    assert re.search(r"&&\s*pip[0-9.]*\s+uninstall\s+(?:-y|--yes)\s+wheel\s*$", first), first


def test_trainer_installs_efa_user_space_only():
    runs = " ".join(a for kind, a in instructions(TRAINING) if kind == "RUN")
    args = dict(a.split("=", 1) for kind, a in instructions(TRAINING) if kind == "ARG" and "=" in a)
    assert re.fullmatch(r"\d+\.\d+\.\d+", args["EFA_INSTALLER_VERSION"])
    assert "efa_installer.sh -y --skip-kmod" in runs
    assert "--no-verify" not in runs and "gpg --batch --verify" in runs
    env = " ".join(a for kind, a in instructions(TRAINING) if kind == "ENV")
    assert "LD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib:/opt/amazon/efa/lib" in env
    # Obsolete or harmful settings belong neither in the image nor in the pod.
    for variable in ("FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "FI_EFA_FORK_SAFE", "RDMAV_FORK_SAFE"):
        assert variable not in (TRAINING).read_text()


def test_gpucheck_pins_the_same_nvml_bindings_as_the_project():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    pinned = [d for d in project["project"]["optional-dependencies"]["workloads"] if d.startswith("nvidia-ml-py==")]
    runs = " ".join(a for kind, a in instructions(CHECKS) if kind == "RUN")
    assert pinned and pinned[0] in runs.split()


PLATFORM_DOCKERFILES = sorted({REPO / i.source for i in IMAGES.values() if i.built_here and
                               i.source.endswith(".Dockerfile") and "workloads/images/" in i.source})


def _copied(path: Path) -> set[Path]:
    """The project's files a Dockerfile copies into the image."""
    files: set[Path] = set()
    for kind, a in instructions(path):
        if kind == "COPY" and not a.startswith("--from"):
            for source in a.split()[:-1]:
                found = REPO / source
                files |= set(found.rglob("*.py")) if found.is_dir() else {found}
    return files


def _imported(module: Path) -> set[str]:
    """The project's modules a file imports, lazily inside functions too (they run)."""
    import ast

    names: set[str] = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
    return {n for n in names if n.split(".")[0] in ("workloads", "infra", "components")}


def _source_of(name: str) -> Path | None:
    path = REPO / Path(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None  # an attribute imported from a module, not a module


# Imported by a copied module only on a path the image never runs: (image, importer, imported),
# globs, and why.
CANARY = "`python -m workloads.serve canary` edits a stack file in a checkout of this repository"
TRAINING_STEPS = ("the golden path's training-image steps (tokens, train, evaluate, canary) import the trainer "
                  "and the serving modules; they run in the training image, never in this one "
                  "(workloads/pipeline/steps.py STEPS)")
NOT_IN_IMAGE = {
    ("serving.Dockerfile", "workloads/serve/*", "infra/config.py"): CANARY,
    ("training.Dockerfile", "workloads/serve/*", "infra/config.py"): CANARY,
    ("features.Dockerfile", "workloads/pipeline/*", "workloads/train/*"): TRAINING_STEPS,
    ("pipelines.Dockerfile", "workloads/pipeline/*", "workloads/train/*"): TRAINING_STEPS,
    ("features.Dockerfile", "workloads/pipeline/canary.py", "workloads/serve/canary.py"): TRAINING_STEPS,
    ("pipelines.Dockerfile", "workloads/pipeline/canary.py", "workloads/serve/canary.py"): TRAINING_STEPS,
}


def _not_in_image(image: str, importer: str, imported: str) -> bool:
    import fnmatch

    return any(image == i and fnmatch.fnmatch(importer, by) and fnmatch.fnmatch(imported, what)
               for i, by, what in NOT_IN_IMAGE)


@pytest.mark.parametrize("path", PLATFORM_DOCKERFILES, ids=lambda p: p.name)
def test_every_project_module_an_image_imports_is_copied_into_it(path):
    """Each copied module's imports of the project (workloads.inputs, workloads.arguments,
    ...) are copied too, or the image fails at its first command."""
    copied = _copied(path)
    missing = set()
    for module in sorted(m for m in copied if m.suffix == ".py"):
        for name in _imported(module):
            source = _source_of(name)
            if source is not None and source not in copied and \
                    not _not_in_image(path.name, str(module.relative_to(REPO)), str(source.relative_to(REPO))):
                missing.add(f"{source.relative_to(REPO)} (imported by {module.relative_to(REPO)})")
    assert not missing, sorted(missing)
