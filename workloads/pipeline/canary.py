"""The golden path's canary: the exported version goes out through the deploy path, as every
change of the served version does, and the run promotes or stops on what Argo Rollouts decided.

1. **Ask for the change.** The served version is stack config, and a stack is changed by the
   platform team's reviewed pull request, never from a tenant's namespace: a token that could
   push to the stacks' repository would let the tenant run its own code in that repository's
   workflows. So the step asks: it tags the registered version with the command that makes
   the change (`python -m workloads.serve canary --stack ... --version ... --repository ...`,
   REQUEST_TAG) and prints it, and waits.
2. **Watch the Rollout.** The served model's Rollout and the Deployment whose template it
   runs, read through the API server (the steps' account may get those two objects and
   nothing else in the serving namespace: components/pipelines_spec.py). The candidate is
   out once the Deployment's template names its version (VERSION_ANNOTATION) and the Rollout
   has seen that template (`status.workloadObservedGeneration`) and its own spec
   (`status.observedGeneration`). Then Argo's verdict:
   - `aborted`: `status.abort`, set when the analysis finds the canary worse (the abort rule,
     components/rollout_spec.py) or someone aborts it; traffic is back on the stable version;
   - `promoted`: phase Healthy with the canary made stable (`stableRS == currentPodHash`) and
     at least one pod available (a Rollout at zero replicas judges nothing).
   Anything else, a Degraded phase that is no abort included (Argo goes on after its progress
   deadline unless told to abort), is waited on. Only `promoted` lets the registry's alias
   and the drift baseline move (workloads/pipeline/steps.py).
3. **Bounded.** A wait past `wait_hours` is an error naming the last state seen; the rerun of
   the step goes on waiting. An API server that does not answer, or answers 5xx or 429, is
   waited through; one that refuses (401, 403, 404) ends the step in one line.

Known gap: a canary aborted and reverted in the stack before the step looked again leaves
the Deployment naming the old version, which reads as not yet deployed: the step waits until
its deadline."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

from workloads.serve.canary import VERSION_ANNOTATION

POLL_S = 30.0
# On the registered version: the change the run waits for, for the platform team to find
# (MLflow's model-version search) and make.
REQUEST_TAG = "mlplat.canary.request"


class CanaryError(RuntimeError):
    """The canary cannot go on: one line."""


class Unavailable(CanaryError):
    """The API server did not answer this time: waited through, not fatal."""


def verdict(rollout: dict[str, Any], deployment: dict[str, Any], version: int) -> tuple[str, str]:
    """(`requested` | `pending` | `promoted` | `aborted`, what the objects say) for `version`."""
    template = ((deployment.get("spec") or {}).get("template") or {}).get("metadata") or {}
    served = (template.get("annotations") or {}).get(VERSION_ANNOTATION)
    if served != str(version):
        return "requested", f"the served Deployment names version {served or 'none'}, not {version} yet"
    status = rollout.get("status") or {}
    generation = (deployment.get("metadata") or {}).get("generation")
    if generation is None or str(status.get("workloadObservedGeneration")) != str(generation):
        return "pending", "Argo Rollouts has not taken the Deployment's new template yet"
    own = (rollout.get("metadata") or {}).get("generation")
    if own is not None and str(status.get("observedGeneration")) != str(own):
        return "pending", "Argo Rollouts has not seen the Rollout's own spec yet"
    phase, message = status.get("phase") or "unknown", status.get("message") or ""
    if status.get("abort"):
        return "aborted", message or "rollout aborted"
    stable, current = status.get("stableRS"), status.get("currentPodHash")
    if phase == "Healthy" and stable and stable == current:
        if not status.get("availableReplicas"):
            return "pending", f"version {version} is stable, but no pod of it is available to have been judged"
        return "promoted", f"version {version} is the stable version"
    return "pending", f"phase {phase}" + (f": {message}" if message else "")


class Cluster(Protocol):
    def read(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The Rollout and the Deployment it runs; Unavailable or CanaryError."""


class Rollouts:
    """The two reads, through the Kubernetes client as the step pod's service account."""

    def __init__(self, namespace: str, name: str) -> None:
        from kubernetes import client, config

        try:
            config.load_incluster_config()
        except config.ConfigException as err:
            raise CanaryError(f"no service-account token to read {namespace}/{name} with: {err}") from None
        self.namespace, self.name = namespace, name
        self.apps = client.AppsV1Api()
        self.custom = client.CustomObjectsApi()

    def read(self) -> tuple[dict[str, Any], dict[str, Any]]:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        where = f"{self.namespace}/{self.name}"
        try:
            rollout = self.custom.get_namespaced_custom_object("argoproj.io", "v1alpha1", self.namespace,
                                                               "rollouts", self.name)
            # As the API server sends it (no round trip through the client's typed models).
            deployment = json.loads(self.apps.read_namespaced_deployment(self.name, self.namespace,
                                                                         _preload_content=False).data)
        except ApiException as err:
            if err.status in (401, 403, 404):
                raise CanaryError(f"the API server answers {err.status} {err.reason} for {where}: the steps' "
                                  "account may get the served Rollout and its Deployment only") from None
            raise Unavailable(f"the API server answers {err.status} {err.reason} for {where}") from None
        except (HTTPError, OSError) as err:
            raise Unavailable(f"the API server is unreachable: {type(err).__name__}") from None
        return rollout, deployment


def request_command(stack: str, version: int, repository: str) -> str:
    """What makes the change: the served version set in the stack file, checked published."""
    return f"python -m workloads.serve canary --stack {stack} --version {version} --repository {repository}"


def run(version: int, *, model: str, stack: str, repository: str, wait_hours: float, cluster: Cluster,
        ask: Callable[[str], None] = lambda command: None, sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """Ask for `version` of `model` to be served in `stack` (`ask` records the command), then
    wait for Argo's verdict."""
    command = request_command(stack, version, repository)
    made = {"request": command, "version": version}
    asked = False
    deadline = clock() + wait_hours * 3600
    while True:
        try:
            rollout, deployment = cluster.read()
            state, said = verdict(rollout, deployment, version)
        except Unavailable as err:
            state, said = "unavailable", str(err)
        if state in ("promoted", "aborted"):
            return {**made, "outcome": state, "message": said}
        if state == "requested" and not asked:
            ask(command)
            print(f"canary: waiting for {model} version {version} in {stack}; asked of the platform team: "
                  f"{command}", file=sys.stderr, flush=True)
            asked = True
        if clock() >= deadline:
            raise CanaryError(f"version {version} of {model} has no verdict after {wait_hours:g} h ({said}); "
                              "a rerun of the step goes on waiting")
        sleep(POLL_S)
