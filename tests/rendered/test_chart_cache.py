"""The chart cache: where a pinned chart is found, and `pull` filling it from a real chart
repository (an HTTP server the test starts, serving an index.yaml Helm wrote), with the
archive checked against the digest the index lists."""

from __future__ import annotations

import functools
import http.server
import shutil
import threading

import pytest
import yaml
from helm_python import chart as helm_chart
from helm_python import registry

from infra.chart_cache import SHARED_CACHE, ChartCacheError, find_in, locate, provenance_versions, pull
from infra.versions import CHARTS


@pytest.fixture
def repository(tmp_path):
    """A chart repository with jobset 0.12.0, served over HTTP on loopback."""
    folder = tmp_path / "repo"
    folder.mkdir()
    helm_chart.package(SHARED_CACHE / "jobset", destination=folder)
    registry.repo_index_generate(folder)
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield folder, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def test_pull_fetches_a_pinned_version_once(repository, tmp_path):
    _folder, url = repository
    cache = tmp_path / "cache"
    lines: list[str] = []
    [first] = pull([("jobset", url, "0.12.0")], cache, progress=lines.append)
    assert first.pulled and first.path == cache / "jobset-0.12.0.tgz"
    assert helm_chart.Chart.load(first.path).version == "0.12.0"
    [again] = pull([("jobset", url, "0.12.0")], cache, progress=lines.append)
    assert not again.pulled
    assert lines == [f"jobset 0.12.0: pulling from {url}", f"jobset 0.12.0: already cached ({first.path})"]


def test_pull_refuses_an_archive_whose_digest_differs_from_the_index(repository, tmp_path):
    folder, url = repository
    index = yaml.safe_load((folder / "index.yaml").read_text())
    index["entries"]["jobset"][0]["digest"] = "0" * 64
    (folder / "index.yaml").write_text(yaml.safe_dump(index))
    cache = tmp_path / "cache"
    with pytest.raises(ChartCacheError, match=r"archive digest sha256:[0-9a-f]{64} differs from the repository index"):
        pull([("jobset", url, "0.12.0")], cache)
    assert not (cache / "jobset-0.12.0.tgz").exists()


def test_pull_of_a_version_the_repository_lacks_is_one_line(repository, tmp_path):
    _folder, url = repository
    with pytest.raises(ChartCacheError, match=rf"chart jobset 9.9.9 is not in the index of {url}"):
        pull([("jobset", url, "9.9.9")], tmp_path / "cache")


def test_an_archive_and_a_source_tree_both_count(tmp_path):
    shutil.copytree(SHARED_CACHE / "kueue", tmp_path / "kueue")
    assert find_in(tmp_path, "kueue", "0.18.2") == tmp_path / "kueue"
    assert find_in(tmp_path, "kueue", "0.18.3") is None
    helm_chart.package(SHARED_CACHE / "jobset", destination=tmp_path)
    assert find_in(tmp_path, "jobset", "0.12.0") == tmp_path / "jobset-0.12.0.tgz"


def test_a_source_tree_whose_version_is_set_at_publish_counts_by_its_provenance():
    # The GPU Operator's git tree says v1.0.0-devel; its release sets v26.3.3.
    assert provenance_versions(SHARED_CACHE)["gpu-operator"] == "v26.3.3"
    assert locate("gpu-operator", CHARTS["gpu-operator"].version) == SHARED_CACHE / "gpu-operator"
    with pytest.raises(ChartCacheError):
        locate("gpu-operator", "v1.0.1")
