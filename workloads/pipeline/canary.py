"""The golden path's canary: the exported version goes out through the deploy path, as every
change of the served version does, and the run promotes or stops on what Argo Rollouts decided.

1. **Ask for the change.** With `serving.canary.repository`, a pull request that sets the stack's `mlplat:inference.version` to
   the exported Triton version: the edit `python -m workloads.serve canary` makes, checked the
   same way (workloads/serve/canary.py edit_version), on a branch named for the model and the
   version, so a rerun finds the request it opened instead of opening another. Review stays
   where every change of a stack is reviewed; the deploy workflow rolls it out once merged.
   Without, the step names the command (`python -m workloads.serve canary`) for the platform
   team, whose pull request it is, and waits: no token, and no way to GitHub, in the tenant's
   namespace.
2. **Watch the Rollout.** The served model's Rollout and the Deployment whose template it
   runs, read through the API server (the steps' service account may get those two objects
   and nothing else in the serving namespace: components/pipelines_spec.py). The candidate is
   out once the Deployment's template names its version (VERSION_ANNOTATION) and the Rollout
   has seen that template (`status.workloadObservedGeneration`). Then Argo's verdict:
   - `aborted`: `status.abort`, or phase Degraded: the analysis found the canary worse (the
     abort rule in components/rollout_spec.py) and traffic is back on the stable version;
   - `promoted`: phase Healthy with the canary made stable (`stableRS == currentPodHash`).
   A pull request closed without merging is `declined`. Only `promoted` lets the registry's
   alias and the drift baseline move (workloads/pipeline/steps.py).
3. **Bounded.** A wait past `wait_hours` is an error naming the last state seen; the rerun of
   the step goes on waiting on the same request.

Known gap: a canary aborted and reverted in the stack before the step looked again leaves
the Deployment naming the old version, which reads as not yet deployed: the step waits until
its deadline."""

from __future__ import annotations

import base64
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from workloads.serve.canary import VERSION_ANNOTATION

POLL_S = 30.0
# The token the step opens its pull request with (the tenant's Secret: components/pipelines_spec.py).
GITHUB_TOKEN_ENV = "MLPLAT_GITHUB_TOKEN"
GITHUB_API = "https://api.github.com"
HTTP_TIMEOUT_S = 30


class CanaryError(RuntimeError):
    """The canary cannot go on: one line."""


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
    phase, message = status.get("phase") or "unknown", status.get("message") or ""
    if status.get("abort") or phase == "Degraded":
        return "aborted", message or f"rollout {phase.lower()}"
    stable, current = status.get("stableRS"), status.get("currentPodHash")
    if phase == "Healthy" and stable and stable == current:
        return "promoted", f"version {version} is the stable version"
    return "pending", f"phase {phase}" + (f": {message}" if message else "")


class Cluster(Protocol):
    def read(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The Rollout and the Deployment it runs."""


class Rollouts:
    """The two reads, through the Kubernetes client as the step pod's service account."""

    def __init__(self, namespace: str, name: str) -> None:
        from kubernetes import client, config

        config.load_incluster_config()
        self.namespace, self.name = namespace, name
        self.apps = client.AppsV1Api()
        self.custom = client.CustomObjectsApi()

    def read(self) -> tuple[dict[str, Any], dict[str, Any]]:
        rollout = self.custom.get_namespaced_custom_object("argoproj.io", "v1alpha1", self.namespace, "rollouts",
                                                           self.name)
        deployment = self.apps.read_namespaced_deployment(self.name, self.namespace)
        return rollout, self.apps.api_client.sanitize_for_serialization(deployment)


@dataclass
class GitHub:
    """The five REST calls a change request makes (GitHub's REST API: git refs, repository
    contents, pulls), with a token allowed contents and pull requests on one repository."""

    repository: str  # owner/name
    token: str
    api: str = GITHUB_API

    def _call(self, method: str, path: str, **body: Any) -> tuple[int, Any]:
        import requests

        try:
            answer = requests.request(method, f"{self.api}/repos/{self.repository}{path}", json=body or None,
                                      timeout=HTTP_TIMEOUT_S,
                                      headers={"Authorization": f"Bearer {self.token}",
                                               "Accept": "application/vnd.github+json",
                                               "X-GitHub-Api-Version": "2022-11-28"})
        except requests.RequestException as err:
            raise CanaryError(f"GitHub {method} {path.split('?')[0]}: {type(err).__name__}") from None
        try:
            data = answer.json()
        except ValueError:
            data = None
        if answer.status_code >= 400 and answer.status_code != 404:
            said = data.get("message") if isinstance(data, dict) else answer.text[:200]
            raise CanaryError(f"GitHub {method} {path.split('?')[0]}: {answer.status_code} {said}")
        return answer.status_code, data

    def find_pull(self, branch: str) -> dict[str, Any] | None:
        owner = self.repository.split("/")[0]
        _, pulls = self._call("GET", f"/pulls?head={owner}:{branch}&state=all")
        return pulls[0] if isinstance(pulls, list) and pulls and isinstance(pulls[0], dict) else None

    def open_pull(self, base: str, branch: str, path: str, edit: Callable[[str], str | None], title: str,
                  body: str) -> dict[str, Any]:
        """The pull request from `branch`, opened once. The file is read (from the branch when
        an earlier attempt made it, else from `base`) and edited before anything is written;
        `edit` returns None when the text holds the change already."""
        found = self.find_pull(branch)
        if found:
            return found
        exists = self._call("GET", f"/git/ref/heads/{branch}")[0] != 404
        status, file = self._call("GET", f"/contents/{path}?ref={branch if exists else base}")
        if status == 404 or not isinstance(file, dict) or not isinstance(file.get("content"), str):
            raise CanaryError(f"GitHub {self.repository}: no {path} on {branch if exists else base}")
        edited = edit(base64.b64decode(file["content"]).decode("utf-8"))
        if not exists:
            status, head = self._call("GET", f"/git/ref/heads/{base}")
            if status == 404:
                raise CanaryError(f"GitHub {self.repository}: no branch {base}")
            self._call("POST", "/git/refs", ref=f"refs/heads/{branch}", sha=head["object"]["sha"])
        if edited is not None:
            self._call("PUT", f"/contents/{path}", message=title, branch=branch, sha=file["sha"],
                       content=base64.b64encode(edited.encode("utf-8")).decode())
        _, pull = self._call("POST", "/pulls", title=title, head=branch, base=base, body=body)
        return pull


def branch_name(model: str, version: int) -> str:
    return f"mlplat/canary/{model}-v{version}"


def stack_edit(stack: str, model: str, version: int) -> Callable[[str], str | None]:
    """The edit of `stacks/Pulumi.<stack>.yaml` that serves `version` of `model`: None when the
    text serves it already; refused when the stack serves another model."""
    from workloads.serve.canary import CanaryError as EditError
    from workloads.serve.canary import edit_version, served

    def edit(text: str) -> str | None:
        name = f"Pulumi.{stack}.yaml"
        try:
            serving, current = served(text, name)
            if serving != model:
                raise CanaryError(f"{name} serves {serving}, not {model}: serving.model_name names the stack's model")
            if current == version:
                return None
            # The pull request's preview checks the whole config; the image has no infra/config.
            return edit_version(text, f"stack {stack}", name, version, [version], validate=False)[0]
        except EditError as err:
            raise CanaryError(str(err)) from None

    return edit


def run(version: int, *, model: str, stack: str, base: str, wait_hours: float, github: GitHub | None,
        cluster: Cluster, pipeline_run: str, sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """Ask for `version` of `model` to be served (once), then wait for Argo's verdict. With no
    `github`, the request is the command the platform team runs (its pull request is theirs)."""
    branch = branch_name(model, version)
    command = f"python -m workloads.serve canary --stack {stack} --version {version}"
    if github is None:
        pull: dict[str, Any] = {}
        made = {"request": command, "version": version}
        print(f"canary: waiting for {model} version {version} in {stack}; asked of the platform team: {command}",
              file=sys.stderr, flush=True)
    else:
        title = f"Serve {model} version {version} (pipeline run {pipeline_run})"
        body = (f"The golden path's run `{pipeline_run}` exported version {version} of `{model}` and asks to "
                f"canary it in `{stack}` (`{command}`). Merging deploys it through the Rollout; the run promotes "
                "it when Argo does.")
        pull = github.open_pull(base, branch, f"stacks/Pulumi.{stack}.yaml", stack_edit(stack, model, version),
                                title, body)
        made = {"pull_request": pull.get("html_url", ""), "branch": branch, "version": version}
    deadline = clock() + wait_hours * 3600
    while True:
        rollout, deployment = cluster.read()
        state, said = verdict(rollout, deployment, version)
        if state in ("promoted", "aborted"):
            return {**made, "outcome": state, "message": said}
        if state == "requested" and github is not None:
            pull = github.find_pull(branch) or pull
            if pull.get("state") == "closed" and not pull.get("merged_at"):
                return {**made, "outcome": "declined", "message": "the pull request was closed without merging"}
        if clock() >= deadline:
            raise CanaryError(f"version {version} of {model} has no verdict after {wait_hours:g} h ({said}); "
                              "a rerun of the step goes on waiting")
        sleep(POLL_S)
