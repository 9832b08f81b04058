"""The Pod Security Standards of Kubernetes 1.34, every control of the baseline and restricted
profiles, judged on every pod template an object holds.

Each check is one control of the upstream definition (k8s.io/pod-security-admission,
`policy/check_*.go`; the Kubernetes docs' "Pod Security Standards" page lists the same), under
the id pod-security-admission gives it, so a finding reads as the admission controller would
refuse the pod. The only departures are stricter: `/proc` mount type must be Default even for
user-namespaced pods, and the `image` volume type is not among the restricted profile's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .common import UNKNOWN, flag, get, items
from .workloads import PodTemplate, containers


@dataclass(frozen=True)
class Control:
    id: str  # pod-security-admission's check id
    profile: str  # baseline or restricted
    title: str  # as the Pod Security Standards page names it


CONTROLS = {c.id: c for c in (
    Control("hostProcess", "baseline", "HostProcess"),
    Control("hostNamespaces", "baseline", "Host Namespaces"),
    Control("privileged", "baseline", "Privileged Containers"),
    Control("capabilities_baseline", "baseline", "Capabilities"),
    Control("hostPathVolumes", "baseline", "HostPath Volumes"),
    Control("hostPorts", "baseline", "Host Ports"),
    Control("appArmorProfile", "baseline", "AppArmor"),
    Control("seLinuxOptions", "baseline", "SELinux"),
    Control("procMount", "baseline", "/proc Mount Type"),
    Control("seccompProfile_baseline", "baseline", "Seccomp"),
    Control("sysctls", "baseline", "Sysctls"),
    Control("restrictedVolumes", "restricted", "Volume Types"),
    Control("allowPrivilegeEscalation", "restricted", "Privilege Escalation"),
    Control("runAsNonRoot", "restricted", "Running as Non-root"),
    Control("runAsUser", "restricted", "Running as Non-root user"),
    Control("seccompProfile_restricted", "restricted", "Seccomp"),
    Control("capabilities_restricted", "restricted", "Capabilities"),
)}

# Baseline: what a container may add (the container runtime's default set).
BASELINE_CAPABILITIES = frozenset({"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                                   "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})
RESTRICTED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
SAFE_SYSCTLS = frozenset({"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                          "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                          "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                          "net.ipv4.tcp_keepalive_probes"})
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
RESTRICTED_VOLUME_SOURCES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                                       "persistentVolumeClaim", "projected", "secret"})
SECCOMP_CONFINED = frozenset({"RuntimeDefault", "Localhost"})
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


@dataclass(frozen=True)
class Finding:
    control: str
    field: str  # where in the pod template, e.g. containers[0].securityContext.privileged
    message: str

    def describe(self, within: str = "") -> str:
        """`[restricted/runAsUser] spec.template.spec.containers[0]...: must not be 0`."""
        where = f"{within}.{self.field}" if within else self.field
        return f"[{CONTROLS[self.control].profile}/{self.control}] {where}: {self.message}"


def _known(value: Any) -> bool:
    return value is not None and value is not UNKNOWN


def _is_zero(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0 \
        or isinstance(value, str) and value.strip() in ("0", "0.0")


def _capability(name: Any) -> str:
    return str(name).upper().removeprefix("CAP_")


def findings(template: PodTemplate) -> list[Finding]:
    """Every control the pod template breaks; [] for a pod the restricted profile admits."""
    return list(_findings(template.spec, template.annotations))


def _findings(spec: Any, annotations: Any) -> Iterator[Finding]:
    pod_sc = get(spec, "securityContext")
    every = list(containers(spec))

    # --- baseline -----------------------------------------------------------------------
    if flag(get(pod_sc, "windowsOptions", "hostProcess")) is True:
        yield Finding("hostProcess", "securityContext.windowsOptions.hostProcess", "must not be true")
    for path, c in every:
        if flag(get(c, "securityContext", "windowsOptions", "hostProcess")) is True:
            yield Finding("hostProcess", f"{path}.securityContext.windowsOptions.hostProcess", "must not be true")
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if flag(get(spec, field)) is True:
            yield Finding("hostNamespaces", field, "must not be true: the pod would share the node's namespace")
    for path, c in every:
        if flag(get(c, "securityContext", "privileged")) is True:
            yield Finding("privileged", f"{path}.securityContext.privileged", "must not be true")
        for cap in items(get(c, "securityContext", "capabilities", "add")):
            if cap is not UNKNOWN and _capability(cap) not in BASELINE_CAPABILITIES:
                yield Finding("capabilities_baseline", f"{path}.securityContext.capabilities.add",
                              f"{cap} is not in the runtime's default set")
        for i, port in enumerate(items(get(c, "ports"))):
            host_port = get(port, "hostPort")
            if _known(host_port) and not _is_zero(host_port):
                yield Finding("hostPorts", f"{path}.ports[{i}].hostPort", f"{host_port}: the pod binds a port on the node")
        proc_mount = get(c, "securityContext", "procMount")
        if _known(proc_mount) and proc_mount != "Default":
            yield Finding("procMount", f"{path}.securityContext.procMount", f"{proc_mount!r}: must be Default")
    volumes = items(get(spec, "volumes"))
    for i, volume in enumerate(volumes):
        if get(volume, "hostPath") is not None:
            yield Finding("hostPathVolumes", f"volumes[{i}].hostPath",
                          f"{get(volume, 'hostPath', 'path')!r} mounts the node's file system")
    yield from _apparmor(pod_sc, every, annotations)
    yield from _selinux(pod_sc, every)
    for where, sc in [("securityContext", pod_sc), *((f"{p}.securityContext", get(c, "securityContext")) for p, c in every)]:
        if get(sc, "seccompProfile", "type") == "Unconfined":
            yield Finding("seccompProfile_baseline", f"{where}.seccompProfile.type", "must not be Unconfined")
    for i, sysctl in enumerate(items(get(pod_sc, "sysctls"))):
        name = get(sysctl, "name")
        if _known(name) and name not in SAFE_SYSCTLS:
            yield Finding("sysctls", f"securityContext.sysctls[{i}].name", f"{name} is not a safe sysctl")

    # --- restricted ---------------------------------------------------------------------
    for i, volume in enumerate(volumes):
        if not isinstance(volume, Mapping):
            continue
        sources = [k for k in volume if k != "name" and get(volume, k) is not None]
        for source in sources:
            if source not in RESTRICTED_VOLUME_SOURCES and source != "hostPath":  # hostPath: its own control
                yield Finding("restrictedVolumes", f"volumes[{i}].{source}",
                              f"volume type {source} is not allowed (only {', '.join(sorted(RESTRICTED_VOLUME_SOURCES))})")
    for path, c in every:
        if flag(get(c, "securityContext", "allowPrivilegeEscalation")) not in (False, UNKNOWN):
            yield Finding("allowPrivilegeEscalation", f"{path}.securityContext.allowPrivilegeEscalation",
                          "must be set to false")
    yield from _non_root(pod_sc, every)
    yield from _seccomp_restricted(pod_sc, every)
    for path, c in every:
        drop = {_capability(d) for d in items(get(c, "securityContext", "capabilities", "drop")) if d is not UNKNOWN}
        if get(c, "securityContext", "capabilities", "drop") is not UNKNOWN and "ALL" not in drop:
            yield Finding("capabilities_restricted", f"{path}.securityContext.capabilities.drop", "must include ALL")
        for cap in items(get(c, "securityContext", "capabilities", "add")):
            if cap is not UNKNOWN and _capability(cap) not in RESTRICTED_CAPABILITIES:
                yield Finding("capabilities_restricted", f"{path}.securityContext.capabilities.add",
                              f"{cap}: only NET_BIND_SERVICE may be added")


def _apparmor(pod_sc: Any, every: list[tuple[str, Any]], annotations: Any) -> Iterator[Finding]:
    for where, sc in [("securityContext", pod_sc), *((f"{p}.securityContext", get(c, "securityContext")) for p, c in every)]:
        kind = get(sc, "appArmorProfile", "type")
        if _known(kind) and kind not in SECCOMP_CONFINED:
            yield Finding("appArmorProfile", f"{where}.appArmorProfile.type", f"{kind!r}: must be RuntimeDefault or Localhost")
    if isinstance(annotations, Mapping):
        for key in annotations:
            value = get(annotations, key)
            if isinstance(key, str) and key.startswith(APPARMOR_ANNOTATION) and isinstance(value, str) \
                    and value != "runtime/default" and not value.startswith("localhost/"):
                yield Finding("appArmorProfile", f"metadata.annotations[{key}]",
                              f"{value!r}: must be runtime/default or localhost/<profile>")


def _selinux(pod_sc: Any, every: list[tuple[str, Any]]) -> Iterator[Finding]:
    for where, sc in [("securityContext", pod_sc), *((f"{p}.securityContext", get(c, "securityContext")) for p, c in every)]:
        options = get(sc, "seLinuxOptions")
        if not isinstance(options, Mapping):
            continue
        kind = get(options, "type")
        if isinstance(kind, str) and kind not in SELINUX_TYPES:
            yield Finding("seLinuxOptions", f"{where}.seLinuxOptions.type", f"{kind!r} is not a container type")
        for field in ("user", "role"):
            value = get(options, field)
            if isinstance(value, str) and value:
                yield Finding("seLinuxOptions", f"{where}.seLinuxOptions.{field}", f"{value!r}: must not be set")


def _non_root(pod_sc: Any, every: list[tuple[str, Any]]) -> Iterator[Finding]:
    pod_level = flag(get(pod_sc, "runAsNonRoot"))
    if pod_level is False:
        yield Finding("runAsNonRoot", "securityContext.runAsNonRoot", "must not be false")
    if _is_zero(get(pod_sc, "runAsUser")):
        yield Finding("runAsUser", "securityContext.runAsUser", "must not be 0")
    for path, c in every:
        own = flag(get(c, "securityContext", "runAsNonRoot"))
        if own is False:
            yield Finding("runAsNonRoot", f"{path}.securityContext.runAsNonRoot", "must not be false")
        elif own is None and pod_level is not True and pod_level is not UNKNOWN:
            yield Finding("runAsNonRoot", f"{path}.securityContext.runAsNonRoot",
                          "must be true (on the container or the pod)")
        if _is_zero(get(c, "securityContext", "runAsUser")):
            yield Finding("runAsUser", f"{path}.securityContext.runAsUser", "must not be 0")


def _seccomp_restricted(pod_sc: Any, every: list[tuple[str, Any]]) -> Iterator[Finding]:
    pod_type = get(pod_sc, "seccompProfile", "type")
    pod_confined = pod_type in SECCOMP_CONFINED or pod_type is UNKNOWN
    for path, c in every:
        own = get(c, "securityContext", "seccompProfile", "type")
        if own is None and not pod_confined:
            yield Finding("seccompProfile_restricted", f"{path}.securityContext.seccompProfile.type",
                          "must be RuntimeDefault or Localhost (on the container or the pod)")
        elif _known(own) and own not in SECCOMP_CONFINED and own != "Unconfined":  # Unconfined: baseline's
            yield Finding("seccompProfile_restricted", f"{path}.securityContext.seccompProfile.type",
                          f"{own!r}: must be RuntimeDefault or Localhost")
