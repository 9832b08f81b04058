"""The golden path's canary step (workloads/pipeline/canary.py): Argo's verdict read from the
Rollout and the Deployment as the API server returns them (fields of the Rollout CRD in the
offline chart cache: status.abort, phase, message, stableRS, currentPodHash, availableReplicas,
observedGeneration, workloadObservedGeneration); the change asked of the platform team once,
as a command that runs; and the steps after it held back by anything but a promotion."""

from __future__ import annotations

import shlex
from contextlib import ExitStack
from types import SimpleNamespace

import pytest

from tests.services.oci import closed_port
from workloads.pipeline import canary, steps
from workloads.pipeline.steps import STEPS, _canaried


def _deployment(version: str | None, generation: int = 7) -> dict:
    annotations = {canary.VERSION_ANNOTATION: version} if version else {}
    return {"metadata": {"name": "triton", "generation": generation},
            "spec": {"template": {"metadata": {"labels": {"app": "triton"}, "annotations": annotations}}}}


def _rollout(**status) -> dict:
    return {"metadata": {"name": "triton", "generation": 3},
            "status": {"workloadObservedGeneration": "7", "observedGeneration": "3", "availableReplicas": 2, **status}}


@pytest.mark.parametrize("rollout, deployment, state", [
    # Not deployed yet: the template serves another version, or names none.
    (_rollout(phase="Healthy", stableRS="a", currentPodHash="a"), _deployment("1"), "requested"),
    (_rollout(phase="Healthy", stableRS="a", currentPodHash="a"), _deployment(None), "requested"),
    # Deployed, but Argo has not taken the new template: its verdict is the old one's.
    (_rollout(phase="Healthy", stableRS="a", currentPodHash="a", workloadObservedGeneration="6"),
     _deployment("2"), "pending"),
    (_rollout(phase="Healthy", stableRS="a", currentPodHash="a", workloadObservedGeneration=None),
     _deployment("2"), "pending"),
    # The canary is running, paused at a step, or healthy but not yet made stable.
    (_rollout(phase="Progressing", stableRS="a", currentPodHash="b"), _deployment("2"), "pending"),
    (_rollout(phase="Paused", stableRS="a", currentPodHash="b", message="CanaryPauseStep"), _deployment("2"),
     "pending"),
    (_rollout(phase="Healthy", stableRS="a", currentPodHash="b"), _deployment("2"), "pending"),
    (_rollout(phase="Healthy"), _deployment("2"), "pending"),  # no hashes at all: not judged promoted
    # The Rollout's own spec changed and Argo has not caught up with it.
    (_rollout(phase="Healthy", stableRS="b", currentPodHash="b", observedGeneration="2"), _deployment("2"),
     "pending"),
    # Stable, but nothing served it: a Rollout at zero replicas judges no canary.
    (_rollout(phase="Healthy", stableRS="b", currentPodHash="b", availableReplicas=0), _deployment("2"), "pending"),
    # Past its progress deadline Argo goes on (no progressDeadlineAbort): not an abort.
    (_rollout(phase="Degraded", message="ProgressDeadlineExceeded: ReplicaSet has timed out progressing"),
     _deployment("2"), "pending"),
    # Argo's verdicts.
    (_rollout(phase="Healthy", stableRS="b", currentPodHash="b"), _deployment("2"), "promoted"),
    (_rollout(phase="Degraded", abort=True, message="RolloutAborted: metric failed"), _deployment("2"), "aborted"),
    # An abort is an abort, whatever the phase says while the stable pods are healthy.
    (_rollout(phase="Healthy", abort=True, stableRS="a", currentPodHash="b"), _deployment("2"), "aborted"),
])
def test_the_verdict_is_argos_for_the_candidate_only(rollout, deployment, state):
    assert canary.verdict(rollout, deployment, 2)[0] == state




class _Cluster:
    """The Rollout as Argo would move it: one answer a read, the last one kept."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.reads = 0

    def read(self):
        self.reads += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


SERVED = (_rollout(phase="Healthy", stableRS="a", currentPodHash="a"), _deployment("1"))
ROLLING = (_rollout(phase="Paused", stableRS="a", currentPodHash="b", message="CanaryPauseStep"), _deployment("2"))
DONE = (_rollout(phase="Healthy", stableRS="b", currentPodHash="b"), _deployment("2"))
ABORTED = (_rollout(phase="Degraded", abort=True, message="RolloutAborted: analysis failed"), _deployment("2"))
COMMAND = "python -m workloads.serve canary --stack prod --version 2 --repository s3://mlplat-prod-models/triton"


def _run(cluster, asked=None, wait_hours=1):
    clock = iter(range(0, 10**6, 60))  # a minute a read
    return canary.run(2, model="gpt", stack="prod", repository="s3://mlplat-prod-models/triton",
                      wait_hours=wait_hours, cluster=cluster, ask=(asked if asked is not None else []).append,
                      sleep=lambda s: None, clock=lambda: next(clock))


def test_the_change_is_asked_once_and_the_verdict_awaited(capsys):
    asked = []
    made = _run(_Cluster(SERVED, SERVED, SERVED, ROLLING, DONE), asked)
    assert made == {"request": COMMAND, "version": 2, "outcome": "promoted",
                    "message": "version 2 is the stable version"}
    assert asked == [COMMAND]  # one request, however long the wait
    assert f"asked of the platform team: {COMMAND}" in capsys.readouterr().err
    # Already out (the rerun of a step that died while it waited): nothing asked again.
    again = []
    assert _run(_Cluster(DONE), again)["outcome"] == "promoted" and again == []


def test_the_command_asked_for_is_one_the_serving_cli_takes(tmp_path, capsys):
    """The platform team runs it as printed: its arguments parse, and it gets as far as
    checking the repository (empty here, so it refuses, writing nothing)."""
    from workloads.serve.cli import main

    argv = shlex.split(canary.request_command("prod", 2, str(tmp_path)))
    assert argv[:3] == ["python", "-m", "workloads.serve"]
    assert main(argv[3:]) == 2
    assert "has no completely published version 2 in the repository (published: none)" in capsys.readouterr().err


def test_an_aborted_canary_is_reported_and_holds_the_alias_and_the_baseline():
    aborted = _run(_Cluster(ROLLING, ABORTED))
    assert (aborted["outcome"], aborted["message"]) == ("aborted", "RolloutAborted: analysis failed")
    ctx = SimpleNamespace(done={"evaluate": {"promote": True}, "canary": aborted})
    # promote and baseline skip before touching the registry (no tracking server here).
    assert steps.promote(ctx) == {"skipped": "canary aborted: RolloutAborted: analysis failed"}
    assert steps.baseline(ctx) == {"skipped": "canary aborted: RolloutAborted: analysis failed"}
    assert _canaried(SimpleNamespace(done={"canary": {**aborted, "outcome": "promoted"}})) is None
    assert _canaried(SimpleNamespace(done={"canary": {"skipped": "no canary configured"}})) is None


def test_the_canary_comes_after_export_and_before_what_it_holds_back():
    order = [s.name for s in STEPS]
    assert order.index("export") < order.index("canary") < order.index("promote") < order.index("baseline")


def test_an_api_server_that_does_not_answer_is_waited_through_and_one_that_refuses_ends_the_step():
    down = canary.Unavailable("the API server answers 503 Service Unavailable for inference/triton")
    cluster = _Cluster(ROLLING, down, down, DONE)
    assert _run(cluster)["outcome"] == "promoted" and cluster.reads == 4
    refused = canary.CanaryError("the API server answers 403 Forbidden for inference/triton: ...")
    with pytest.raises(canary.CanaryError, match="403 Forbidden"):
        _run(_Cluster(ROLLING, refused))


def test_no_verdict_by_the_deadline_is_an_error_naming_the_last_state():
    with pytest.raises(canary.CanaryError, match=r"no verdict after 1 h \(phase Paused: CanaryPauseStep\); a rerun"):
        _run(_Cluster(ROLLING))
    with pytest.raises(canary.CanaryError, match=r"after 1 h \(the API server answers 503"):
        _run(_Cluster(canary.Unavailable("the API server answers 503 Service Unavailable for inference/triton")))


class _ApiServer:
    """A stand-in API server answering the two GETs the step makes, with a set status."""

    def __init__(self, status: int):
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        answers = {"/apis/argoproj.io/v1alpha1/namespaces/inference/rollouts/triton": DONE[0],
                   "/apis/apps/v1/namespaces/inference/deployments/triton": {
                       "apiVersion": "apps/v1", "kind": "Deployment", **DONE[1]}}

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802
                body = json.dumps(answers[self.path] if status == 200 else
                                  {"kind": "Status", "code": status, "message": "no"}).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"


def _reader(url: str) -> canary.Rollouts:
    """The step's reader with the real Kubernetes client, pointed at `url` (in a pod it
    loads the in-cluster config instead)."""
    from kubernetes import client

    reader = canary.Rollouts.__new__(canary.Rollouts)
    config = client.Configuration()
    config.host = url
    config.retries = 0
    api = client.ApiClient(config)
    reader.namespace, reader.name = "inference", "triton"
    reader.apps, reader.custom = client.AppsV1Api(api), client.CustomObjectsApi(api)
    return reader


@pytest.mark.parametrize("status, error, said", [
    (200, None, ""),
    (403, canary.CanaryError, "the API server answers 403 Forbidden for inference/triton: the steps' account may get"),
    (404, canary.CanaryError, "the API server answers 404 Not Found for inference/triton"),
    (503, canary.Unavailable, "the API server answers 503 Service Unavailable for inference/triton"),
    (None, canary.Unavailable, "the API server is unreachable: "),
])
def test_the_kubernetes_clients_answers_are_a_verdict_a_wait_or_one_line(status, error, said):
    with ExitStack() as held:
        if status is None:
            url = f"http://127.0.0.1:{held.enter_context(closed_port())}"  # bound, never listening: refuses
        else:
            server = _ApiServer(status)
            held.callback(server.server.server_close)  # after the shutdown below: callbacks run last first
            held.callback(server.server.shutdown)
            url = server.url
        reader = _reader(url)
        if error is None:
            assert canary.verdict(*reader.read(), 2)[0] == "promoted"
            return
        with pytest.raises(error) as raised:
            reader.read()
        assert str(raised.value).startswith(said) and "\n" not in str(raised.value)
        assert type(raised.value) is error
