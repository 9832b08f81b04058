"""skopeo's errors, as it prints them, are read by their words, never by the references
they quote: a registry on port 34010 or a digest holding "404" is not an HTTP status."""

from __future__ import annotations

import pytest

from infra.skopeo import RegistryError, Unreachable, raise_for

# stderr of skopeo 1.9.3 against a docker-registry on 127.0.0.1:34010 (and nothing on :34011).
MISSING_TAG = ('time="2026-11-24T13:12:15Z" level=fatal msg="Error parsing image name '
               '\\"docker://127.0.0.1:34010/mlplat/dev/mirror/arm-only:v1\\": reading manifest v1 in '
               '127.0.0.1:34010/mlplat/dev/mirror/arm-only: manifest unknown: manifest unknown"')
MISSING_DIGEST = ('time="2026-11-24T13:12:15Z" level=fatal msg="Error parsing image name '
                  '\\"docker://127.0.0.1:34010/x@sha256:40404010' + "0" * 56 + '\\": reading manifest sha256:'
                  '40404010' + "0" * 56 + ' in 127.0.0.1:34010/x: manifest unknown: manifest unknown"')
REFUSED = ('time="2026-11-24T13:12:15Z" level=fatal msg="Error parsing image name \\"docker://127.0.0.1:34011/x:v1\\": '
           'pinging container registry 127.0.0.1:34011: Get \\"http://127.0.0.1:34011/v2/\\": dial tcp '
           '127.0.0.1:34011: connect: connection refused"')
FORBIDDEN = ('time="2026-11-24T13:12:15Z" level=fatal msg="initializing source docker://nvcr.io/nvidia/x:v1: '
             'reading manifest v1 in nvcr.io/nvidia/x: invalid status code from registry 403 (Forbidden)"')
DENIED = ('time="2026-11-24T13:12:15Z" level=fatal msg="reading manifest v1 in docker.io/library/x: '
          'requested access to the resource is denied"')


@pytest.mark.parametrize("stderr", [MISSING_TAG, MISSING_DIGEST])
def test_a_missing_manifest_is_missing_whatever_the_port_or_digest(stderr):
    assert raise_for(stderr, "127.0.0.1:34010/x:v1") is None


def test_a_missing_manifest_at_the_destination_of_a_copy_is_an_error_not_a_login_problem():
    with pytest.raises(RegistryError) as caught:
        raise_for(MISSING_TAG, "127.0.0.1:34011/x:v1", destination="127.0.0.1:34010/mlplat/dev/mirror/arm-only:v1")

    assert not isinstance(caught.value, Unreachable) and caught.value.host == "127.0.0.1:34010"


@pytest.mark.parametrize(("stderr", "host", "says"), [
    (REFUSED, "127.0.0.1:34011", "cannot reach registry 127.0.0.1:34011"),
    (FORBIDDEN, "nvcr.io", "registry nvcr.io refused the credentials"),
    (DENIED, "docker.io", "registry docker.io refused the credentials"),
])
def test_network_and_credential_failures_name_the_registry(stderr, host, says):
    with pytest.raises(Unreachable) as caught:
        raise_for(stderr, f"{host}/x:v1")

    assert caught.value.host == host and says in str(caught.value)
