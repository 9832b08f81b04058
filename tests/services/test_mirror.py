"""`mlplat mirror` against real registries: two CNCF distribution registries on this
machine (one upstream, one in-region), real skopeo and Helm's registry client. Each test
reads back what the in-region registry holds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import pytest
from helm_python import chart as helm_chart
from helm_python import registry as helm_registry

from infra import cli
from infra.skopeo import Skopeo
from infra.versions import Chart, Image
from tests.conftest import REPO
from tests.services.oci import chart_repository, closed_port, package_chart, push_chart, push_image

pytestmark = pytest.mark.slow


def _read(registry, reference: str):
    return Skopeo(None, frozenset({registry.host})).inspect(f"{registry.host}/{reference}")


def _mirror(monkeypatch, capsys, upstream, mirror, images, charts=(), *extra):
    monkeypatch.setattr("infra.mirror.IMAGES", {i.name: i for i in images})
    monkeypatch.setattr("infra.mirror.CHARTS", {c.name: c for c in charts})
    code = cli.main(["mirror", "--stack", "dev", "--registry", mirror.host, "--plain-http", upstream.host,
                     "--plain-http", mirror.host, *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_copies_a_two_platform_index_whole_by_digest_and_a_chart(tmp_path, registries, monkeypatch, capsys):
    upstream, mirror = registries
    plugin = push_image(tmp_path / "plugin", upstream, "nvidia/k8s-device-plugin:v0.19.3", "plugin")
    single = push_image(tmp_path / "cli", upstream, "aws-cli/aws-cli:2.37.1", "cli", platforms=("linux/amd64",))
    oci_archive, kueue_manifest = push_chart(tmp_path / "kueue", upstream, "charts", "kueue", "0.18.2")
    https_archive = package_chart(tmp_path / "repo", "dcgm-exporter", "4.8.2")
    images = [Image("k8s-device-plugin", f"{upstream.host}/nvidia/k8s-device-plugin", "v0.19.3", plugin.digest),
              Image("aws-cli", f"{upstream.host}/aws-cli/aws-cli", "2.37.1", single.digest),
              Image("training", "workloads/images/training.Dockerfile", "0.1.0", built_here=True)]

    with chart_repository(tmp_path / "repo") as url:
        charts = [Chart("kueue", f"oci://{upstream.host}/charts", "0.18.2", kueue_manifest),
                  Chart("dcgm-exporter", url, "4.8.2", helm_chart.digest(https_archive))]
        code, out, err = _mirror(monkeypatch, capsys, upstream, mirror, images, charts)

    assert code == 0, err
    index = _read(mirror, "mlplat/dev/mirror/k8s-device-plugin:v0.19.3")
    assert index.digest == plugin.digest and index.platforms() == {"linux/amd64", "linux/arm64"}
    for entry in index.body["manifests"]:  # every platform's manifest and layers, not just the index
        manifest = _read(mirror, f"mlplat/dev/mirror/k8s-device-plugin@{entry['digest']}")
        assert manifest.digest == entry["digest"]
        assert all(mirror.blob_path(layer["digest"]).exists() for layer in manifest.body["layers"])
    assert _read(mirror, "mlplat/dev/mirror/aws-cli:2.37.1").digest == single.digest
    # An OCI chart is copied by its manifest digest; a chart from an https repository becomes
    # an OCI artifact whose layer is the pinned archive. Helm installs either from there.
    assert _read(mirror, "mlplat/dev/charts/kueue:0.18.2").digest == kueue_manifest
    held = _read(mirror, "mlplat/dev/charts/dcgm-exporter:4.8.2")
    assert [layer["digest"] for layer in held.body["layers"]] == [helm_chart.digest(https_archive)]
    (tmp_path / "pulled").mkdir()
    for name, version, archive in (("kueue", "0.18.2", oci_archive), ("dcgm-exporter", "4.8.2", https_archive)):
        helm_registry.pull(f"oci://{mirror.host}/mlplat/dev/charts/{name}", version=version,
                           destination=tmp_path / "pulled", plain_http=True)
        assert (tmp_path / "pulled" / archive.name).read_bytes() == archive.read_bytes()
    # The platform's own images are built by CI, never mirrored.
    assert _read(mirror, "mlplat/dev/training:0.1.0") is None
    assert "[1/4] image k8s-device-plugin v0.19.3: copying" in err and "2 platforms: linux/amd64, linux/arm64" in err
    assert f"[3/4] chart kueue 0.18.2: copying {upstream.host}/charts/kueue@{kueue_manifest}" in err
    assert "[4/4] chart dcgm-exporter 4.8.2: pushing dcgm-exporter-4.8.2.tgz" in err
    assert out.strip().startswith("copied 4 artifact(s)")


def test_refuses_an_upstream_tag_that_no_longer_names_the_pin(tmp_path, registries, monkeypatch, capsys):
    upstream, mirror = registries
    pinned = push_image(tmp_path / "a", upstream, "nvidia/dcgm-exporter:4.5.3", "first build")
    moved = push_image(tmp_path / "b", upstream, "nvidia/dcgm-exporter:4.5.3", "rebuilt under the same tag")
    images = [Image("dcgm-exporter", f"{upstream.host}/nvidia/dcgm-exporter", "4.5.3", pinned.digest)]

    code, out, err = _mirror(monkeypatch, capsys, upstream, mirror, images)

    assert code == 1
    [line] = err.strip().splitlines()[-1:]
    assert line.startswith("mlplat: mirror failed: image dcgm-exporter: upstream ")
    assert moved.digest in line and pinned.digest in line
    assert _read(mirror, "mlplat/dev/mirror/dcgm-exporter:4.5.3") is None  # nothing copied


def test_refuses_a_chart_that_is_not_the_pin(tmp_path, registries, monkeypatch, capsys):
    upstream, mirror = registries
    _, manifest = push_chart(tmp_path / "oci", upstream, "charts", "jobset", "0.12.0")
    archive = package_chart(tmp_path / "repo", "aws-fsx-csi-driver", "1.16.0")
    wrong = "sha256:" + "1" * 64

    with chart_repository(tmp_path / "repo") as url:
        for chart, actual in ((Chart("jobset", f"oci://{upstream.host}/charts", "0.12.0", wrong), manifest),
                              (Chart("aws-fsx-csi-driver", url, "1.16.0", wrong), helm_chart.digest(archive))):
            code, _, err = _mirror(monkeypatch, capsys, upstream, mirror, [], [chart])

            assert code == 1
            assert f"chart {chart.name}:" in err and actual in err and wrong in err
            assert _read(mirror, f"mlplat/dev/charts/{chart.name}:{chart.version}") is None


def test_never_overwrites_a_mirror_tag_that_holds_another_digest(tmp_path, registries, monkeypatch, capsys):
    upstream, mirror = registries
    pinned = push_image(tmp_path / "a", upstream, "prometheus/prometheus:v3", "upstream")
    other = push_image(tmp_path / "b", mirror, "mlplat/dev/mirror/prometheus:v3", "something else")
    images = [Image("prometheus", f"{upstream.host}/prometheus/prometheus", "v3", pinned.digest)]

    code, _, err = _mirror(monkeypatch, capsys, upstream, mirror, images)

    assert code == 1 and "image prometheus:" in err and "holds" in err and "immutable" in err
    assert _read(mirror, "mlplat/dev/mirror/prometheus:v3").digest == other.digest


def test_refuses_an_image_without_a_platform_the_node_pools_run(tmp_path, registries, monkeypatch, capsys):
    upstream, mirror = registries
    arm = push_image(tmp_path / "a", upstream, "tools/arm-only:v1", "arm", platforms=("linux/arm64",))
    images = [Image("arm-only", f"{upstream.host}/tools/arm-only", "v1", arm.digest)]

    code, _, err = _mirror(monkeypatch, capsys, upstream, mirror, images)

    assert code == 1 and "image arm-only:" in err and "not linux/amd64, which the node pools run" in err
    assert _read(mirror, "mlplat/dev/mirror/arm-only:v1") is None


def test_a_second_run_copies_nothing_and_says_so(tmp_path, registries, monkeypatch, capsys):
    upstream, mirror = registries
    built = push_image(tmp_path / "a", upstream, "nvidia/k8s-device-plugin:v1", "plugin")
    _, chart_digest = push_chart(tmp_path / "chart", upstream, "charts", "kueue", "0.18.2")
    images = [Image("k8s-device-plugin", f"{upstream.host}/nvidia/k8s-device-plugin", "v1", built.digest)]
    charts = [Chart("kueue", f"oci://{upstream.host}/charts", "0.18.2", chart_digest)]
    assert _mirror(monkeypatch, capsys, upstream, mirror, images, charts)[0] == 0
    stored = {p: p.stat().st_mtime_ns for p in mirror.root.rglob("*")}
    upstream.stop()  # a repeat run needs nothing from upstream

    code, out, err = _mirror(monkeypatch, capsys, upstream, mirror, images, charts)

    assert code == 0, err
    assert out.strip() == f"nothing to copy: all 2 artifact(s) are in {mirror.host} at their pinned digests"
    assert {p: p.stat().st_mtime_ns for p in mirror.root.rglob("*")} == stored  # nothing written


def test_dry_run_lists_what_and_how_much_and_copies_nothing(tmp_path, registries, monkeypatch, capsys):
    upstream, mirror = registries
    built = push_image(tmp_path / "a", upstream, "nvidia/k8s-device-plugin:v1", "plugin", layer_bytes=2_000_000)
    images = [Image("k8s-device-plugin", f"{upstream.host}/nvidia/k8s-device-plugin", "v1", built.digest)]

    code, out, err = _mirror(monkeypatch, capsys, upstream, mirror, images, (), "--dry-run")

    assert code == 0, err
    assert f"would copy {upstream.host}/nvidia/k8s-device-plugin@{built.digest} (2 platforms" in err
    assert f"{built.size / 1e6:,.1f} MB" in err and out.startswith("would copy 1 artifact(s)")
    assert _read(mirror, "mlplat/dev/mirror/k8s-device-plugin:v1") is None


# The resume test runs `mlplat mirror` as a process of its own and interrupts it the way a
# cancelled CI job does; the plan is the test's, set before the command runs.
_RUNNER = textwrap.dedent("""
    import json, sys
    from infra import cli, mirror
    from infra.versions import Image
    plan = json.loads(sys.argv[1])
    mirror.IMAGES = {i["name"]: Image(**i) for i in plan}
    mirror.CHARTS = {}
    sys.exit(cli.main(sys.argv[2:]))
""")


def _digests(uploads: list[str]) -> set[str]:
    return {u.replace("%3A", ":") for u in uploads}


def test_resumes_after_an_interrupted_copy(tmp_path, registries):
    upstream, mirror = registries
    small = push_image(tmp_path / "a", upstream, "nvidia/k8s-mig-manager:v1", "small")
    # Four platforms of 48 MB each: the copy is still running when its first layer lands.
    big = push_image(tmp_path / "b", upstream, "nvidia/pytorch:26.01", "big", layer_bytes=48 << 20,
                     platforms=("linux/amd64", "linux/arm64", "linux/ppc64le", "linux/s390x"))
    plan = [{"name": "k8s-mig-manager", "source": f"{upstream.host}/nvidia/k8s-mig-manager", "tag": "v1",
             "digest": small.digest},
            {"name": "pytorch", "source": f"{upstream.host}/nvidia/pytorch", "tag": "26.01", "digest": big.digest}]
    command = [sys.executable, "-c", _RUNNER, json.dumps(plan), "mirror", "--stack", "dev", "--registry",
               mirror.host, "--plain-http", upstream.host, "--plain-http", mirror.host]
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not mirror.blob_path(big.layers[0]).exists():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.005)
    process.send_signal(signal.SIGTERM)  # what a cancelled job's runner sends
    _, err = process.communicate(timeout=60)

    assert process.returncode == 130, err
    assert "mlplat: mirror interrupted; run it again to resume" in err
    assert _read(mirror, "mlplat/dev/mirror/k8s-mig-manager:v1").digest == small.digest
    assert _read(mirror, "mlplat/dev/mirror/pytorch:26.01") is None  # never tagged half-copied
    uploaded_before = len(mirror.uploads())

    resumed = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)

    assert resumed.returncode == 0, resumed.stderr
    assert _read(mirror, "mlplat/dev/mirror/pytorch:26.01").digest == big.digest
    assert "image k8s-mig-manager" not in resumed.stderr  # whole artifacts are not touched again
    # Nor are blobs the interrupted run sent: the registry's own log says what was uploaded.
    first_run = mirror.uploads()[:uploaded_before]
    again = mirror.uploads()[uploaded_before:]
    assert big.layers[0] in _digests(first_run) and big.layers[0] not in _digests(again)
    assert set(big.layers[1:]) <= _digests(first_run + again)
    assert resumed.stdout.strip().startswith("copied 1 artifact(s)")


# --- bad input: one line, exit 2, nothing copied ------------------------------------------


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("mlplat:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_an_image_in_the_plan_without_a_digest(registries, monkeypatch, capsys):
    upstream, mirror = registries
    images = [Image("kueue", f"{upstream.host}/kueue/kueue", "v0.18.2")]

    code, _, err = _mirror(monkeypatch, capsys, upstream, mirror, images)

    assert code == 2
    assert _one_line(err).startswith("mlplat: error: image kueue in the plan without a sha256 digest; pin each")


def test_an_unknown_stack(capsys):
    code = cli.main(["mirror", "--stack", "qa", "--registry", "111122223333.dkr.ecr.me-central-1.amazonaws.com"])

    assert code == 2
    assert _one_line(capsys.readouterr().err).startswith("mlplat: error: unknown stack 'qa'")


def test_a_registry_in_another_region(capsys):
    code = cli.main(["mirror", "--stack", "prod-cluster", "--registry", "111122223333.dkr.ecr.us-east-1.amazonaws.com"])

    assert code == 2
    assert _one_line(capsys.readouterr().err) == (
        "mlplat: error: registry 111122223333.dkr.ecr.us-east-1.amazonaws.com is in us-east-1, but the stack deploys "
        "to me-central-1; mirror into the stack's own region")


def test_an_unreachable_registry_names_the_host_and_how_to_log_in(tmp_path, registries, monkeypatch, capsys):
    upstream, _ = registries
    built = push_image(tmp_path / "a", upstream, "kueue/kueue:v1", "kueue")
    images = [Image("kueue", f"{upstream.host}/kueue/kueue", "v1", built.digest)]

    handler = signal.getsignal(signal.SIGTERM)

    with closed_port() as port:  # nothing answers there, and nothing else can take the port meanwhile
        mirror = SimpleNamespace(host=f"127.0.0.1:{port}")
        code, _, err = _mirror(monkeypatch, capsys, upstream, mirror, images)

    line = _one_line(err)
    assert code == 2, err
    # Run in-process, the command leaves the caller's SIGTERM handler as it found it.
    assert signal.getsignal(signal.SIGTERM) is handler
    assert line.startswith(f"mlplat: error: cannot reach registry {mirror.host} (")
    assert line.endswith(f"log in with `skopeo login {mirror.host}` (REGISTRY_AUTH_FILE names the file it writes)")
