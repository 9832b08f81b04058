"""Credentials for `mlplat mirror` come from the environment or an existing login, are
written to a private file for the run, and are gone after it."""

from __future__ import annotations

import base64
import json
import stat

from infra.skopeo import auth_file, host_of, login_hint


def test_environment_credentials_join_existing_logins_in_a_private_file(tmp_path):
    login = tmp_path / "auth.json"
    login.write_text(json.dumps({"auths": {"111122223333.dkr.ecr.me-central-1.amazonaws.com": {"auth": "QVdTOng="}}}))
    env = {"HOME": str(tmp_path / "home"), "REGISTRY_AUTH_FILE": str(login), "NGC_API_KEY": "nvapi-secret",
           "DOCKERHUB_USERNAME": "platform", "DOCKERHUB_TOKEN": "dckr_pat"}

    with auth_file(env) as path:
        auths = json.loads(path.read_text())["auths"]
        mode = stat.S_IMODE(path.stat().st_mode)

    assert mode == 0o600 and not path.exists()
    assert base64.b64decode(auths["nvcr.io"]["auth"]).decode() == "$oauthtoken:nvapi-secret"
    assert base64.b64decode(auths["docker.io"]["auth"]).decode() == "platform:dckr_pat"
    assert auths["111122223333.dkr.ecr.me-central-1.amazonaws.com"] == {"auth": "QVdTOng="}


def test_no_credentials_no_entries(tmp_path):
    with auth_file({"HOME": str(tmp_path), "NGC_API_KEY": ""}) as path:
        assert json.loads(path.read_text()) == {"auths": {}}


def test_hosts_and_login_hints():
    assert host_of("nvcr.io/nvidia/pytorch:26.01-py3") == "nvcr.io"
    assert host_of("oci://registry.k8s.io/kueue/charts") == "registry.k8s.io"
    assert host_of("127.0.0.1:5000/x/y@sha256:ab") == "127.0.0.1:5000"
    assert "aws ecr get-login-password --region me-central-1" in login_hint(
        "111122223333.dkr.ecr.me-central-1.amazonaws.com")
    assert login_hint("nvcr.io").startswith("set NGC_API_KEY in the environment")
