"""`mlplat pin` against real registries on this machine (the CNCF distribution registry the
mirror tests start, and an https-style chart repository): it reads what each tag names,
writes the missing pins into the plan file where each call is, leaves a pin the tag
still names alone, refuses one the tag no longer names unless told to update it, and a
second run changes nothing."""

from __future__ import annotations

import json
import runpy
import textwrap

import pytest
from helm_python import chart as helm_chart

from infra import cli
from tests.services.oci import chart_repository, package_chart, push_chart, push_image

pytestmark = pytest.mark.slow
OLD = "sha256:" + "0" * 64


def _plan(path, host, chart_url, cli_digest):
    path.write_text(textwrap.dedent(f'''\
        """A plan like infra/versions.py."""
        from infra.versions import AWS_ONLY, Chart, Image

        IMAGES = {{
            image.name: image
            for image in (
                # Not pinned yet.
                Image("plugin", "{host}/nvidia/plugin", "v1", sites=AWS_ONLY),
                Image("cli", "{host}/aws-cli/aws-cli", "2",
                      "{cli_digest}"),
                Image("moved", "{host}/x/moved", "v1", "{OLD}"),
                Image("training", "workloads/images/training.Dockerfile", "0.1.0", built_here=True),
            )
        }}
        CHARTS = {{
            chart.name: chart
            for chart in (
                Chart("kueue", "oci://{host}/charts", "0.18.2"),
                Chart("dcgm-exporter", "{chart_url}", "4.8.2"),
            )
        }}
        '''))


def _pin(capsys, plan, configs, host, *extra):
    code = cli.main(["pin", "--versions", str(plan), "--policy-configs", str(configs), "--plain-http", host, *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_pin_writes_what_the_registries_name_and_refuses_a_moved_tag(tmp_path, registries, capsys):
    upstream, _ = registries
    host = upstream.host
    plugin = push_image(tmp_path / "plugin", upstream, "nvidia/plugin:v1", "plugin")
    single = push_image(tmp_path / "cli", upstream, "aws-cli/aws-cli:2", "cli", platforms=("linux/amd64",))
    moved = push_image(tmp_path / "moved", upstream, "x/moved:v1", "moved", platforms=("linux/amd64",))
    _archive, kueue = push_chart(tmp_path / "kueue", upstream, "charts", "kueue", "0.18.2")
    dcgm = helm_chart.digest(package_chart(tmp_path / "repo", "dcgm-exporter", "4.8.2"))
    configs = tmp_path / "config"
    configs.mkdir()
    awaiting = {"k8s-images-pinned": {"awaitingPin": [{"repository": "mirror/plugin", "reason": "r"},
                                                      {"repository": "mirror/other", "reason": "r"}]}}
    (configs / "prod.json").write_text(json.dumps(awaiting, indent=2) + "\n")
    plan = tmp_path / "versions.py"

    with chart_repository(tmp_path / "repo") as url:
        _plan(plan, host, url, single.digest)
        before = plan.read_bytes()

        # A dry run lists what it would pin and what moved, and writes nothing; the moved tag fails it.
        code, out, err = _pin(capsys, plan, configs, host, "--dry-run")
        assert code == 1, err
        assert f"would pin image plugin v1: {plugin.digest}" in out
        assert f"would pin chart kueue 0.18.2: {kueue}" in out and f"would pin chart dcgm-exporter 4.8.2: {dcgm}" in out
        assert f"moved: image moved v1 now names {moved.digest}, pinned {OLD}" in out
        assert out.strip().endswith("3 new, 0 updated, 1 unchanged, 1 moved, 0 not read")
        assert plan.read_bytes() == before and "mirror/plugin" in (configs / "prod.json").read_text()

        # Without the moved one: the three pins written where their calls are; the file stays Python.
        code, out, err = _pin(capsys, plan, configs, host, "--only", "plugin", "--only", "kueue",
                              "--only", "dcgm-exporter", "--only", "cli")
        assert code == 0, err
        scope = runpy.run_path(str(plan))
        assert scope["IMAGES"]["plugin"].digest == plugin.digest and scope["IMAGES"]["plugin"].sites == ("aws",)
        assert scope["CHARTS"]["kueue"].digest == kueue and scope["CHARTS"]["dcgm-exporter"].digest == dcgm
        assert scope["IMAGES"]["moved"].digest == OLD
        assert "# Not pinned yet." in plan.read_text(), "comments stay"
        left = json.loads((configs / "prod.json").read_text())["k8s-images-pinned"]["awaitingPin"]
        assert [e["repository"] for e in left] == ["mirror/other"]

        # A second run with nothing new changes nothing.
        written = plan.read_bytes()
        code, out, _ = _pin(capsys, plan, configs, host, "--only", "plugin", "--only", "kueue", "--only", "cli")
        assert code == 0 and "0 new, 0 updated, 3 unchanged" in out and plan.read_bytes() == written

        # The moved tag, once reviewed: taken with --update, its literal replaced.
        code, out, err = _pin(capsys, plan, configs, host, "--update", "moved")
        assert code == 0, err
        assert f"updated image moved v1: {OLD} -> {moved.digest}" in out
        assert runpy.run_path(str(plan))["IMAGES"]["moved"].digest == moved.digest


def test_a_tag_the_registry_lacks_is_listed_and_left(tmp_path, registries, capsys):
    upstream, _ = registries
    plan = tmp_path / "versions.py"
    _plan(plan, upstream.host, "http://127.0.0.1:9/charts", OLD)
    before = plan.read_bytes()
    code, out, _ = _pin(capsys, plan, tmp_path, upstream.host, "--only", "plugin")
    assert code == 0 and "not read: image plugin (" in out and plan.read_bytes() == before


@pytest.mark.parametrize("argv, says", [
    (["--only", "nope"], "--only nope: not a mirrored image or chart of the plan"),
    (["--update", "training"], "--update training: not a mirrored image or chart of the plan"),
])
def test_pin_bad_input_is_one_line(tmp_path, capsys, argv, says):
    plan = tmp_path / "versions.py"
    _plan(plan, "127.0.0.1:9", "http://127.0.0.1:9/charts", OLD)
    code, _out, err = _pin(capsys, plan, tmp_path, "127.0.0.1:9", *argv)
    assert code == 2 and err.count("\n") == 1 and says in err, err


def test_pin_refuses_a_file_that_is_not_the_plan(tmp_path, capsys):
    plan = tmp_path / "versions.py"
    plan.write_text("X = 1\n")
    code, _out, err = _pin(capsys, plan, tmp_path, "127.0.0.1:9")
    assert code == 2 and "holds no IMAGES and CHARTS" in err and err.count("\n") == 1


def test_without_aws_credentials_an_ecr_source_is_not_read_and_the_rest_are_pinned(tmp_path, registries, capsys,
                                                                                   monkeypatch):
    """The weekly run has no AWS credentials: EKS's registry (an ECR source) cannot be
    logged in to, and only its entries are left; the run goes on and pins the others."""
    upstream, _ = registries
    plugin = push_image(tmp_path / "plugin", upstream, "nvidia/plugin:v1", "plugin")
    plan = tmp_path / "versions.py"
    _plan(plan, upstream.host, "http://127.0.0.1:9/charts", OLD)
    text = plan.read_text().replace('Image("cli", "' + upstream.host + '/aws-cli/aws-cli", "2",',
                                    'Image("cli", "111122223333.dkr.ecr.me-central-1.amazonaws.com/aws-cli/aws-cli", '
                                    '"2",')
    plan.write_text(text)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    code, out, err = _pin(capsys, plan, tmp_path, upstream.host, "--only", "plugin", "--only", "cli")
    assert code == 0, err
    assert "111122223333.dkr.ecr.me-central-1.amazonaws.com: no ECR login" in err
    assert "not read: image cli (" in out and f"pinned image plugin v1: {plugin.digest}" in out
    assert runpy.run_path(str(plan))["IMAGES"]["plugin"].digest == plugin.digest
