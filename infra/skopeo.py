"""The OCI copier `mlplat mirror` drives: skopeo (Debian's `skopeo` package) for images,
Helm's own registry client (helm-python-sdk) for charts, and the credentials both read.

Nothing here speaks the registry protocol itself. skopeo copies a manifest list whole
(`--all`), keeps every digest (`--preserve-digests`: it refuses rather than convert), skips
blobs the destination already has, and checks every blob against its digest as it reads.

Credentials never come from the repository. Both tools read a containers auth file
(`{"auths": {host: {"auth": base64(user:password)}}}`): the one `skopeo login` and
`docker login` (or aws-actions/amazon-ecr-login) write, merged with credentials for the
sources that need them taken from the environment (NGC_API_KEY for nvcr.io,
DOCKERHUB_USERNAME and DOCKERHUB_TOKEN for docker.io), written to a private temporary
file for the run and removed after it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workloads import inputs

SKOPEO = "skopeo"
ECR_HOST = re.compile(r"^(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com$")
# Media types of a list of per-platform manifests.
INDEX_TYPES = {"application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json"}
# (environment variables, user name or None: the first variable holds it) per source registry.
ENV_CREDENTIALS: dict[str, tuple[tuple[str, ...], str | None]] = {
    "nvcr.io": (("NGC_API_KEY",), "$oauthtoken"),
    "docker.io": (("DOCKERHUB_USERNAME", "DOCKERHUB_TOKEN"), None),
}
_UNREACHABLE = ("connection refused", "no such host", "i/o timeout", "network is unreachable",
                "connection reset", "tls: ", "server gave http response to https client", "context deadline exceeded")
_UNAUTHORIZED = ("unauthorized", "authentication required", "denied", "forbidden", " 401", " 403")
# A word that quotes a host, a port or a digest.
_REFERENCE = re.compile(r"\.\w|:\d|@|sha256")
_NOT_FOUND = ("manifest unknown", "name unknown", "not found", " 404")


class RegistryError(Exception):
    """A registry that did not answer as needed: `host`, and one line saying why."""

    def __init__(self, host: str, message: str) -> None:
        super().__init__(message)
        self.host = host


class Unreachable(RegistryError):
    """The host did not answer, or refused our credentials: a user's setting to fix."""


def login_hint(host: str) -> str:
    """How to give the tools credentials for `host`."""
    ecr = ECR_HOST.match(host)
    if ecr:
        return (f"log in with `aws ecr get-login-password --region {ecr.group(2)} | skopeo login --username AWS "
                f"--password-stdin {host}` as a role that may push to it")
    if host in ENV_CREDENTIALS:
        names, user = ENV_CREDENTIALS[host]
        return f"set {' and '.join(names)} in the environment, or `skopeo login {host}`" + (
            f" with user {user!r}" if user else "")
    return f"log in with `skopeo login {host}` (REGISTRY_AUTH_FILE names the file it writes)"


def host_of(reference: str) -> str:
    """`nvcr.io/nvidia/x:tag` -> `nvcr.io`; a bare Docker Hub name -> `docker.io`."""
    reference = reference.removeprefix("oci://").removeprefix("docker://")
    first = reference.split("/", 1)[0]
    return first if "/" in reference and ("." in first or ":" in first or first == "localhost") else "docker.io"


def sha256(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


@dataclass(frozen=True)
class Manifest:
    """A manifest as a registry serves it: its bytes' digest and what it says."""

    digest: str
    body: dict[str, Any]

    @property
    def is_index(self) -> bool:
        return self.body.get("mediaType") in INDEX_TYPES or "manifests" in self.body

    def platforms(self) -> set[str]:
        """`os/architecture[/variant]` of every entry of an index."""
        found = set()
        for entry in self.body.get("manifests") or []:
            platform = entry.get("platform") or {}
            if platform.get("os") and platform.get("architecture"):
                found.add("/".join(p for p in (platform["os"], platform["architecture"], platform.get("variant")) if p))
        return found

    def size(self) -> int:
        """Bytes of config and layers of a single-platform manifest."""
        parts = [self.body.get("config") or {}, *(self.body.get("layers") or [])]
        return sum(int(p.get("size") or 0) for p in parts)


class Skopeo:
    """skopeo, with the run's auth file and the registries spoken to over plain HTTP
    (local test registries; never a production registry)."""

    def __init__(self, authfile: Path | None, plain_http: frozenset[str] = frozenset()) -> None:
        self.authfile = authfile
        self.plain_http = plain_http

    def _tls(self, flag: str, reference: str) -> list[str]:
        return [f"{flag}=false"] if host_of(reference) in self.plain_http else []

    def _auth(self) -> list[str]:
        return ["--authfile", str(self.authfile)] if self.authfile else []

    def inspect(self, reference: str) -> Manifest | None:
        """The manifest `reference` names (`host/path:tag` or `host/path@digest`), or None
        when the registry has no such manifest."""
        result = self._run(["inspect", "--raw", "--retry-times", "2", *self._auth(),
                            *self._tls("--tls-verify", reference), f"docker://{reference}"], reference, text=False)
        if result is None:
            return None
        return Manifest(sha256(result), json.loads(result))

    def image_platform(self, reference: str) -> str:
        """`os/architecture[/variant]` of a single-platform image."""
        result = self._run(["inspect", "--retry-times", "2", *self._auth(), *self._tls("--tls-verify", reference),
                            f"docker://{reference}"], reference)
        if result is None:
            raise RegistryError(host_of(reference), f"{reference}: no such image")
        data = json.loads(result)
        return "/".join(p for p in (data.get("Os"), data.get("Architecture"), data.get("Variant")) if p)

    def copy(self, source: str, destination: str) -> None:
        """Copy `source` (by digest) to `destination` (a tag), every platform of a list,
        digests kept."""
        args = ["copy", "--all", "--preserve-digests", "--retry-times", "3", *self._auth(),
                *self._tls("--src-tls-verify", source), *self._tls("--dest-tls-verify", destination),
                f"docker://{source}", f"docker://{destination}"]
        self._run(args, source, destination=destination)

    def _run(self, args: list[str], reference: str, *, destination: str | None = None, text: bool = True) -> Any:
        try:
            result = subprocess.run([SKOPEO, *args], capture_output=True, text=text, check=False)
        except FileNotFoundError:
            raise RegistryError("", "skopeo is not installed; install it (Debian/Ubuntu: apt-get install skopeo)") \
                from None
        if result.returncode == 0:
            return result.stdout
        message = result.stderr if text else result.stderr.decode(errors="replace")
        raise_for(message, reference, destination)
        return None  # the manifest is not there


def raise_for(message: str, source: str, destination: str | None = None) -> None:
    """Turn skopeo's error into one of ours; return quietly for a missing manifest."""
    line = _last_message(message)
    # Match on skopeo's words, not on the references it quotes: a port such as 34010 or a
    # digest holding "404" must not read as an HTTP status.
    lowered = " " + " ".join(w for w in line.lower().split() if not _REFERENCE.search(w))
    # skopeo names the registry it was talking to; otherwise blame the source.
    host = host_of(destination) if destination and host_of(destination) in line else host_of(source)
    if any(word in lowered for word in _UNREACHABLE):
        raise Unreachable(host, f"cannot reach registry {host} ({line}); check the network, then {login_hint(host)}")
    if any(word in lowered for word in _UNAUTHORIZED):
        raise Unreachable(host, f"registry {host} refused the credentials ({line}); {login_hint(host)}")
    if destination is None and any(word in lowered for word in _NOT_FOUND):
        return
    raise RegistryError(host, line)


def _last_message(stderr: str) -> str:
    """skopeo's `level=fatal msg="..."` text, on one line."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else "skopeo failed without a message"
    match = re.search(r'msg="(.*)"\s*$', last)
    text = match.group(1).replace('\\"', '"') if match else last
    return " ".join(text.split())


def _read_auths(path: Path) -> dict[str, Any]:
    # Bounded: a FIFO or device named by REGISTRY_AUTH_FILE is skipped, never read forever.
    try:
        data = inputs.read_json(path, "registry login file", 1 << 20)
    except inputs.InputError:
        return {}
    auths = data.get("auths") if isinstance(data, dict) else None
    return auths if isinstance(auths, dict) else {}


def default_auth_files(env: Mapping[str, str]) -> list[Path]:
    """Where skopeo and docker keep logins, lowest precedence first."""
    home = Path(env.get("HOME") or Path.home())
    files = [home / ".docker" / "config.json"]
    if env.get("XDG_RUNTIME_DIR"):
        files.append(Path(env["XDG_RUNTIME_DIR"]) / "containers" / "auth.json")
    if env.get("REGISTRY_AUTH_FILE"):
        files.append(Path(env["REGISTRY_AUTH_FILE"]))
    return files


def credentials_from(env: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """Auth entries for the sources whose credentials are set in the environment."""
    found = {}
    for host, (names, user) in ENV_CREDENTIALS.items():
        values = [env.get(name, "") for name in names]
        if all(values):
            username, password = (user, values[0]) if user else (values[0], values[1])
            token = base64.b64encode(f"{username}:{password}".encode()).decode()
            # Docker Hub logins are stored under its v1 index URL too.
            for key in (host, "https://index.docker.io/v1/") if host == "docker.io" else (host,):
                found[key] = {"auth": token}
    return found


def ecr_credentials(hosts: Iterable[str], env: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """Auth entries for ECR source registries (the EKS add-on registry of the stack's
    region, which the EFA device plugin is copied from): ECR's authorization token for the
    region, from the AWS credentials in the environment, as `aws ecr get-login-password`
    gives it. The token opens every registry of the region the caller may pull from."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    found: dict[str, dict[str, str]] = {}
    for host in sorted(set(hosts)):
        ecr = ECR_HOST.match(host)
        if not ecr:
            continue
        session = boto3.Session(region_name=ecr.group(2))
        try:
            data = session.client("ecr", endpoint_url=env.get("AWS_ENDPOINT_URL") or None).get_authorization_token()
        except (BotoCoreError, ClientError) as err:
            raise Unreachable(host, f"{host}: no ECR login ({str(err)[:200]}); sign in to AWS as the deployer, or "
                                    f"{login_hint(host)}") from None
        found[host] = {"auth": data["authorizationData"][0]["authorizationToken"]}
    return found


@contextmanager
def auth_file(env: Mapping[str, str] | None = None, ecr_sources: Iterable[str] = ()) -> Iterator[Path]:
    """A private auth file for one run: every login already on this machine, the
    credentials from the environment on top, and an ECR login for each ECR source host
    with none. Removed afterwards."""
    env = os.environ if env is None else env
    auths: dict[str, Any] = {}
    for path in default_auth_files(env):
        auths.update(_read_auths(path))
    auths.update(credentials_from(env))
    auths.update(ecr_credentials([h for h in ecr_sources if h not in auths], env))
    handle, name = tempfile.mkstemp(prefix="mlplat-auth-", suffix=".json")
    try:
        with os.fdopen(handle, "w") as out:  # mkstemp: readable by this user only
            json.dump({"auths": auths}, out)
        yield Path(name)
    finally:
        Path(name).unlink(missing_ok=True)
