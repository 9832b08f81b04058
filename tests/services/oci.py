"""Real services for the mirror tests: CNCF distribution registries (Debian's
`docker-registry`) on free local ports, and images built as OCI layouts on disk, pushed
with skopeo. `make test` installs both tools (Makefile `services`); a test that finds
one missing fails, naming what to install, and never skips."""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.client
import http.server
import io
import json
import os
import random
import re
import shutil
import socket
import subprocess
import tarfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

REGISTRY_BINARY = shutil.which("docker-registry") or "/usr/bin/docker-registry"
INSTALL = "install skopeo and docker-registry (Debian/Ubuntu: sudo apt-get install skopeo docker-registry)"


def require_tools() -> None:
    missing = [name for name, found in (("skopeo", shutil.which("skopeo")),
                                        ("docker-registry", os.access(REGISTRY_BINARY, os.X_OK))) if not found]
    if missing:
        pytest.fail(f"{', '.join(missing)} not found: {INSTALL}", pytrace=False)


# Where free_port() looks: from here to the start of the kernel's ephemeral range.
PORTS_FROM = 10000


def ephemeral_range(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> tuple[int, int]:
    """The ports the kernel hands out by itself (bind to port 0, a client's source port)."""
    try:
        low, high = (int(field) for field in path.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default
    return low, high


def free_port(ephemeral: tuple[int, int] | None = None) -> int:
    """A local port, free now, for a server a test is about to start on it.

    Not one from binding port 0: that is drawn from the ephemeral range, the same range every
    outgoing connection draws its source port from, and between this call and the server's
    own bind a client in another test could take it (the server then fails to start). Below
    that range the kernel hands out nothing by itself; only explicit binds take a port there,
    and the servers' ports are drawn at random from thousands."""
    low, _ = ephemeral or ephemeral_range()
    draw = random.SystemRandom()
    for _ in range(200 if low - PORTS_FROM >= 1000 else 0):
        port = draw.randrange(PORTS_FROM, low)
        with socket.socket() as sock:
            try:  # every address: some servers listen on all of them
                sock.bind(("0.0.0.0", port))
            except OSError:  # taken on one of them, or in TIME_WAIT
                continue
        return port
    with socket.socket() as sock:  # an ephemeral range that starts too low to draw below: the kernel picks
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def closed_port() -> Iterator[int]:
    """A local port that refuses every connection while the block runs: bound, never
    listening. A port merely freed is not that: another test's server can take it, and a
    client connecting to it can be handed the same port as its own source and so talk to
    itself (a TCP self-connect); either answers instead of refusing."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@dataclass
class Registry:
    """One running registry; `host` is `127.0.0.1:<port>`, `root` its storage."""

    host: str
    root: Path
    process: subprocess.Popen

    def blob_path(self, digest: str) -> Path:
        hexdigest = digest.removeprefix("sha256:")
        return self.root / "docker/registry/v2/blobs/sha256" / hexdigest[:2] / hexdigest / "data"

    def uploads(self) -> list[str]:
        """Digests of the blobs clients finished uploading, in order (the access log's
        `PUT .../blobs/uploads/<id>?digest=sha256:...`)."""
        log = (self.root.parent / "registry.log").read_text()
        return re.findall(r'"PUT /v2/[^ ]*/blobs/uploads/[^ ]*[?&]digest=(sha256(?::|%3A)[0-9a-f]{64})', log)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def start_registry(folder: Path) -> Registry:
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = folder / "config.yml"
    config.write_text(json.dumps({  # YAML is a superset of JSON
        "version": 0.1,
        # The access log records every request: what a client uploaded, and when.
        "log": {"level": "error", "accesslog": {"disabled": False}},
        "storage": {"filesystem": {"rootdirectory": str(folder / "data")}, "delete": {"enabled": True}},
        "http": {"addr": f"127.0.0.1:{port}"},
    }))
    log = (folder / "registry.log").open("w")
    process = subprocess.Popen([REGISTRY_BINARY, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        # Ready when the registry's API answers as the registry: a bare connection could be
        # another server that took the port first, or a TCP self-connect while nothing listens.
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1) as answer:
                ours = answer.headers.get("Docker-Distribution-Api-Version") == "registry/2.0"
        except (OSError, http.client.HTTPException):
            ours = False
        if ours and process.poll() is None:
            return Registry(f"127.0.0.1:{port}", folder / "data", process)
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"docker-registry did not start: {(folder / 'registry.log').read_text()[-500:]}")


@dataclass(frozen=True)
class BuiltImage:
    digest: str  # of the index (or the one manifest)
    layers: tuple[str, ...]  # every layer blob's digest
    size: int  # bytes of configs and layers


class Layout:
    """An OCI image layout on disk: blobs, and one image (a two-platform index or a
    single manifest), as `skopeo copy oci:<dir>` reads it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        (folder / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
        (folder / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))

    def blob(self, data: bytes, media_type: str) -> dict:
        digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
        (self.folder / "blobs" / "sha256" / digest[7:]).write_bytes(data)
        return {"mediaType": media_type, "digest": digest, "size": len(data)}

    def image(self, label: str, platforms: tuple[str, ...] = ("linux/amd64", "linux/arm64"),
              layer_bytes: int = 0) -> BuiltImage:
        """An image whose every platform has one layer: a file naming `label` and the
        platform, padded with `layer_bytes` random (incompressible) bytes."""
        entries, layers, size = [], [], 0
        for platform in platforms:
            os_name, arch = platform.split("/")[:2]
            tar = io.BytesIO()
            with tarfile.open(fileobj=tar, mode="w") as archive:
                data = f"{label} {platform}\n".encode() + os.urandom(layer_bytes)
                info = tarfile.TarInfo("content")
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
            # Large layers stay uncompressed: random bytes do not compress, and gzip would
            # only slow the fixture down.
            if layer_bytes > 1 << 20:
                layer = self.blob(tar.getvalue(), "application/vnd.oci.image.layer.v1.tar")
            else:
                layer = self.blob(gzip.compress(tar.getvalue(), mtime=0), "application/vnd.oci.image.layer.v1.tar+gzip")
            config = self.blob(json.dumps({
                "architecture": arch, "os": os_name, "config": {},
                "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(tar.getvalue()).hexdigest()}"]},
            }).encode(), "application/vnd.oci.image.config.v1+json")
            manifest_type = "application/vnd.oci.image.manifest.v1+json"
            manifest = self.blob(json.dumps({"schemaVersion": 2, "mediaType": manifest_type, "config": config,
                                             "layers": [layer]}).encode(), manifest_type)
            entries.append({**manifest, "platform": {"architecture": arch, "os": os_name}})
            layers.append(layer["digest"])
            size += layer["size"] + config["size"]
        if len(entries) == 1:
            top = {k: v for k, v in entries[0].items() if k != "platform"}
        else:
            top = self.blob(json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                                        "manifests": entries}).encode(), "application/vnd.oci.image.index.v1+json")
        (self.folder / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [top]}))
        return BuiltImage(top["digest"], tuple(layers), size)


def push_image(folder: Path, registry: Registry, reference: str, label: str, **options) -> BuiltImage:
    """Build an image in a fresh layout under `folder` and push it, whole, to
    `registry/reference` (`path:tag`)."""
    layout = Layout(folder)
    built = layout.image(label, **options)
    subprocess.run(["skopeo", "copy", "--all", "--preserve-digests", "--dest-tls-verify=false",
                    f"oci:{folder}", f"docker://{registry.host}/{reference}"], check=True, capture_output=True)
    return built


def package_chart(folder: Path, name: str, version: str) -> Path:
    """A small chart, packaged as `<folder>/<name>-<version>.tgz`."""
    from helm_python import chart as helm_chart

    (folder / "src").mkdir(parents=True, exist_ok=True)
    helm_chart.Chart.create(name, folder / "src")
    return Path(helm_chart.package(folder / "src" / name, destination=folder, version=version))


def push_chart(folder: Path, registry: Registry, repository: str, name: str, version: str) -> tuple[Path, str]:
    """Package a small chart and push it to `oci://registry/repository`; its archive and
    the digest of the manifest the registry holds for it."""
    from helm_python import registry as helm_registry

    archive = package_chart(folder, name, version)
    helm_registry.push(archive, f"oci://{registry.host}/{repository}", plain_http=True)
    raw = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false",
                          f"docker://{registry.host}/{repository}/{name}:{version}"], check=True, capture_output=True)
    return archive, f"sha256:{hashlib.sha256(raw.stdout).hexdigest()}"


@contextmanager
def chart_repository(folder: Path) -> Iterator[str]:
    """An https-style chart repository (index.yaml beside the archives) served over HTTP
    from `folder`; yields its URL."""
    from helm_python import registry as helm_registry

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    helm_registry.repo_index_generate(folder, base_url=url)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *_args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield url
    finally:
        server.shutdown()
        server.server_close()
