"""Where a golden-path task runs its step in the cluster: a Job (the `train` step: a JobSet) in
the tenant's namespace, from the templates the cluster layer rendered for it
(components/pipelines_spec.py step_templates), labelled with the tenant's Kueue queue, so a
step waits for the tenant's quota like any job and never goes around it.

The task submits the step, waits for it to finish, and returns the step's last stdout line
(its outputs as JSON), read from the pod's log. A task that dies while its step runs (the
scheduler restarted, the task retried) finds the step still running by its labels (the
run's hash and the step) and waits for that one instead of starting a second. A failed step
is never resubmitted here: Airflow's retry submits a new one, and the step's ledger makes
the rerun continue (workloads/pipeline/steps.py)."""

from __future__ import annotations

import copy
import hashlib
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

RUN_LABEL = "mlplat.io/pipeline-run"
VERB_LABEL = "mlplat.io/pipeline-verb"
POLL_S = 10.0
LOG_TAIL = 200  # lines of the pod's log read back: the outputs line is the last


class LaunchError(RuntimeError):
    """The step's Job failed, or could not be submitted: one line."""


def run_label(args: tuple[str, ...]) -> str:
    """The run an invocation belongs to, as a label value: a hash of `--run` (ids can be
    longer than a label), or `none` for verbs of no run (`triggers`)."""
    run = args[args.index("--run") + 1] if "--run" in args else ""
    return hashlib.sha256(run.encode()).hexdigest()[:16] if run else "none"


def verb_of(args: tuple[str, ...]) -> str:
    """`step <name> ...` -> the step's name; other verbs by their own."""
    return args[1] if args and args[0] == "step" and len(args) > 1 else args[0]


def template_for(templates: Mapping[str, Any], image: str, verb: str) -> dict[str, Any]:
    key = verb if verb in ("train", "canary") and verb in templates else image
    if key not in templates:
        raise LaunchError(f"{verb}: no step template for the {image} image (the cluster layer renders one per image "
                          f"the tenant's steps use: {', '.join(sorted(templates))})")
    return copy.deepcopy(templates[key])


def _pod_specs(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    if manifest["kind"] == "JobSet":
        return [r["template"]["spec"]["template"]["spec"] for r in manifest["spec"]["replicatedJobs"]]
    return [manifest["spec"]["template"]["spec"]]


def manifest(templates: Mapping[str, Any], image: str, args: tuple[str, ...]) -> dict[str, Any]:
    """The Job (or JobSet) one invocation runs as: the template with a generated name, the
    run's and the verb's labels (on the pods too: logs are found by them) and the arguments."""
    verb = verb_of(args)
    made = template_for(templates, image, verb)
    labels = {RUN_LABEL: run_label(args), VERB_LABEL: verb}
    made["metadata"].pop("name", None)
    made["metadata"]["generateName"] = f"gp-{verb}-"
    made["metadata"]["labels"] = {**made["metadata"].get("labels", {}), **labels}
    if made["kind"] == "JobSet":
        for job in made["spec"]["replicatedJobs"]:
            pod = job["template"]["spec"]["template"]
            pod.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
    else:
        made["spec"]["template"].setdefault("metadata", {}).setdefault("labels", {}).update(labels)
    for spec in _pod_specs(made):
        for container in spec["containers"]:
            container["args"] = list(args)
    return made


def outputs_line(log: str) -> str:
    """The step's outputs: the last line of its log that is a JSON object."""
    for line in reversed(log.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                json.loads(line)
            except ValueError:
                continue
            return line
    raise LaunchError("the step finished but printed no outputs line")


def _finished(status: Mapping[str, Any] | None) -> str | None:
    """'done', 'failed', or None while it runs (Job and JobSet conditions alike)."""
    for condition in (status or {}).get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") in ("Complete", "Completed"):
            return "done"
        if condition.get("type") == "Failed":
            return "failed"
    return None


class Cluster:
    """The calls the launcher makes, through the Kubernetes client as the engine's own
    service account (its Role: Jobs, JobSets, pods and their logs in its namespace)."""

    def __init__(self, namespace: str) -> None:
        from kubernetes import client, config

        config.load_incluster_config()
        self.namespace = namespace
        self.batch = client.BatchV1Api()
        self.core = client.CoreV1Api()
        self.custom = client.CustomObjectsApi()

    def _jobset(self) -> dict[str, str]:
        return {"group": "jobset.x-k8s.io", "version": "v1alpha2", "namespace": self.namespace, "plural": "jobsets"}

    def find(self, kind: str, selector: str) -> list[dict[str, Any]]:
        if kind == "JobSet":
            return self.custom.list_namespaced_custom_object(**self._jobset(), label_selector=selector)["items"]
        items = self.batch.list_namespaced_job(self.namespace, label_selector=selector).items
        return [self.batch.api_client.sanitize_for_serialization(i) for i in items]

    def create(self, made: dict[str, Any]) -> str:
        if made["kind"] == "JobSet":
            return self.custom.create_namespaced_custom_object(**self._jobset(), body=made)["metadata"]["name"]
        return self.batch.create_namespaced_job(self.namespace, made).metadata.name

    def status(self, kind: str, name: str) -> dict[str, Any] | None:
        if kind == "JobSet":
            return self.custom.get_namespaced_custom_object(**self._jobset(), name=name).get("status")
        return self.batch.api_client.sanitize_for_serialization(
            self.batch.read_namespaced_job_status(name, self.namespace).status)

    def log(self, kind: str, name: str) -> str:
        label = "jobset.sigs.k8s.io/jobset-name" if kind == "JobSet" else "batch.kubernetes.io/job-name"
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=f"{label}={name}").items
        if not pods:
            return ""
        newest = max(pods, key=lambda p: p.metadata.creation_timestamp)
        return self.core.read_namespaced_pod_log(newest.metadata.name, self.namespace, tail_lines=LOG_TAIL)


def run(cluster: Any, templates: Mapping[str, Any], image: str, args: tuple[str, ...],
        sleep: Callable[[float], None] = time.sleep) -> str:
    """Submit the invocation (or find it still running), wait, return its outputs line."""
    made = manifest(templates, image, args)
    kind, labels = made["kind"], made["metadata"]["labels"]
    selector = f"{RUN_LABEL}={labels[RUN_LABEL]},{VERB_LABEL}={labels[VERB_LABEL]}"
    running = [o for o in cluster.find(kind, selector) if _finished(o.get("status")) is None] \
        if labels[RUN_LABEL] != "none" else []
    name = running[0]["metadata"]["name"] if running else cluster.create(made)
    while (state := _finished(cluster.status(kind, name))) is None:
        sleep(POLL_S)
    log = cluster.log(kind, name)
    if state == "failed":
        said = [line for line in log.splitlines() if line.strip()]
        raise LaunchError(f"{kind} {name} failed: {said[-1] if said else '(no log)'}")
    return outputs_line(log)
