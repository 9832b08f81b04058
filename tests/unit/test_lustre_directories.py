"""The Job that gives each tenant its directory on the Lustre scratch file system, as plain
data; and its script, run by a real shell against a scratch directory."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path, PurePosixPath

import pytest

from components.addons.values import NAMESPACES, mirror_image
from components.addons.volumes import (
    DIRECTORIES_CLAIM,
    DIRECTORIES_JOB,
    DIRECTORIES_NAMESPACE,
    LustreVolume,
    directories_claim,
    directories_job,
    directories_network_policy,
    directories_volume,
    scratch_volume,
    tenant_directory,
)
from components.tenancy_spec import SYSTEM_NAMESPACES
from components.training_spec import POD_SECURITY, RUN_AS, TrainingPlan, gpu_pod
from infra.catalog import lookup

LUSTRE = LustreVolume("fs-0123456789abcdef0", "fs-0123456789abcdef0.fsx.me-central-1.amazonaws.com", "abcdefgh", 1200)
IMAGE = mirror_image("node-debug", "111122223333", "me-central-1", "prod").uri
TENANTS = ("research", "applied")
GROUPS = {"research": 30001, "applied": 30002}


@pytest.fixture
def job():
    return directories_job([(t, GROUPS[t]) for t in TENANTS], IMAGE)


def container_of(job):
    [container] = job["spec"]["template"]["spec"]["containers"]
    return container


def test_job_runs_beside_the_fsx_driver_in_a_namespace_that_admits_root(job):
    assert DIRECTORIES_NAMESPACE == NAMESPACES["aws-fsx-csi-driver"] == "kube-system"
    assert SYSTEM_NAMESPACES[DIRECTORIES_NAMESPACE].level == "privileged"
    assert job["metadata"] == {"name": DIRECTORIES_JOB, "namespace": "kube-system",
                               "labels": job["spec"]["template"]["metadata"]["labels"]}
    # No queue name: Kueue leaves it alone.
    assert not any(k.startswith("kueue.x-k8s.io/") for k in job["metadata"]["labels"])


def test_job_makes_one_directory_per_tenant_where_training_writes(job):
    command = container_of(job)["command"]
    assert command[:2] == ["sh", "-euc"] and command[3] == "sh"
    assert command[4:] == ["/fsx/research=30001", "/fsx/applied=30002"]
    plan = TrainingPlan(name="run1", namespace="research", queue="default", pool="p5", instance=lookup("p5.48xlarge"),
                        efa=True, nodes=2, min_nodes=2, image="i", checks_image="c", service_account="run1",
                        lustre_claim="lustre-scratch")
    # The tenant's pods mount its own directory at /fsx: their jobs' directories are there.
    assert str(PurePosixPath(plan.work_dir).parent) == tenant_directory("research") == command[4].split("=")[0]
    mount = container_of(job)["volumeMounts"]
    assert mount == [{"name": "lustre", "mountPath": "/fsx"}]


def test_directories_belong_to_root_and_the_tenants_group_setgid(job):
    env = {e["name"]: e["value"] for e in container_of(job)["env"]}
    assert env == {"OWNER": "0", "MODE": "2770"}
    # The tenant's pods: the workloads' shared UID, which owns nothing there, in the tenant's
    # group, which alone gets in.
    plan = TrainingPlan(name="run1", namespace="research", queue="default", pool="p5", instance=lookup("p5.48xlarge"),
                        efa=True, nodes=2, min_nodes=2, image="i", checks_image="c", service_account="run1",
                        lustre_claim="lustre-scratch", gid=GROUPS["research"])
    security = gpu_pod(plan, {"name": "main"}, [])["securityContext"]
    assert (security["runAsUser"], security["runAsGroup"], security["fsGroup"]) == (RUN_AS, 30001, 30001)
    assert POD_SECURITY["runAsUser"] == RUN_AS


def test_root_with_four_capabilities_and_nothing_else(job):
    security = container_of(job)["securityContext"]
    assert security["runAsUser"] == 0 and security["runAsNonRoot"] is False
    assert security["privileged"] is False and security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID"]}
    pod = job["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not {"hostNetwork", "hostPID", "hostIPC"} & set(pod)


def test_image_limits_and_retries(job):
    container = container_of(job)
    assert container["image"] == IMAGE and ".dkr.ecr.me-central-1." in IMAGE and re.search(r":1\.37\.0@sha256:[0-9a-f]{64}$", IMAGE)
    resources = container["resources"]
    assert resources["limits"]["cpu"] and resources["limits"]["memory"]
    spec = job["spec"]
    assert spec["template"]["spec"]["restartPolicy"] == "Never"
    assert 0 < spec["backoffLimit"] and 0 < spec["activeDeadlineSeconds"]
    assert "ttlSecondsAfterFinished" not in spec  # a deleted Job would be recreated on the next refresh


def test_own_static_volume_and_claim_on_the_same_file_system(job):
    volume, claim = directories_volume(LUSTRE), directories_claim(LUSTRE)
    tenant = scratch_volume("research", LUSTRE)
    # The Job mounts the root; a tenant, its own directory and nothing above it.
    assert volume["spec"]["csi"]["volumeHandle"] == tenant["spec"]["csi"]["volumeHandle"]
    assert volume["spec"]["csi"]["volumeAttributes"]["mountname"] == "abcdefgh"
    assert tenant["spec"]["csi"]["volumeAttributes"] == {"dnsname": LUSTRE.dns_name, "mountname": "abcdefgh/research"}
    assert volume["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert volume["spec"]["claimRef"] == {"namespace": "kube-system", "name": DIRECTORIES_CLAIM}
    assert claim["metadata"] == {"name": DIRECTORIES_CLAIM, "namespace": "kube-system"}
    assert claim["spec"]["volumeName"] == volume["metadata"]["name"]
    assert "mlplat.io/tenant" not in volume["metadata"]["labels"]
    assert job["spec"]["template"]["spec"]["volumes"] == [
        {"name": "lustre", "persistentVolumeClaim": {"claimName": DIRECTORIES_CLAIM}}]


def test_network_policy_isolates_the_jobs_pod(job):
    policy = directories_network_policy()
    assert policy["metadata"]["namespace"] == job["metadata"]["namespace"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= job["spec"]["template"]["metadata"]["labels"].items()
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert "ingress" not in policy["spec"] and "egress" not in policy["spec"]


def run_script(job, root: Path) -> subprocess.CompletedProcess:
    """The container's command against `root` instead of /fsx, owned by whoever runs the
    tests (chown to another user needs root, which the test does not have)."""
    container = container_of(job)
    command = [*container["command"][:4], *(f"{root / PurePosixPath(a.split('=')[0]).name}={os.getgid()}"
                                              for a in container["command"][4:])]
    env = {e["name"]: e["value"] for e in container["env"]}
    env["OWNER"] = str(os.getuid())
    return subprocess.run(command, env={"PATH": os.environ["PATH"], **env}, capture_output=True, text=True,
                          timeout=30)


def test_script_makes_each_directory_and_is_idempotent(job, tmp_path):
    (tmp_path / "research").mkdir(mode=0o755)
    (tmp_path / "research" / "keep").write_text("checkpoint")
    for _ in range(2):
        done = run_script(job, tmp_path)
        assert done.returncode == 0, done.stderr
        for tenant in TENANTS:
            info = (tmp_path / tenant).stat()
            assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o2770, tenant
            assert (info.st_uid, info.st_gid) == (os.getuid(), os.getgid())
    assert (tmp_path / "research" / "keep").read_text() == "checkpoint"
    assert done.stdout.count("drwxrws---") == len(TENANTS)


def test_script_fails_when_a_directory_cannot_be_made(job, tmp_path):
    (tmp_path / "research").write_text("a file where the directory should be")
    done = run_script(job, tmp_path)
    assert done.returncode != 0
    assert not (tmp_path / "applied").exists()
