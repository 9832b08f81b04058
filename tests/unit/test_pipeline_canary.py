"""The golden path's canary step (workloads/pipeline/canary.py): Argo's verdict read from the
Rollout and the Deployment as the API server returns them (fields of the Rollout CRD in the
offline chart cache: status.abort, phase, message, stableRS, currentPodHash,
workloadObservedGeneration), and the change asked for once, as a pull request, from a
stand-in of GitHub's REST API.

The stand-in follows GitHub's REST documentation for the calls made: `GET /repos/{o}/{r}/git/
ref/heads/{b}` (404 when absent), `POST .../git/refs` (201), `GET .../contents/{path}?ref=`
(base64 content and the blob's sha), `PUT .../contents/{path}` (the blob's sha is required to
replace a file, 409 when it is stale), `GET .../pulls?head=owner:branch&state=all` and
`POST .../pulls` (201; 422 when a pull request from that head exists)."""

from __future__ import annotations

import base64
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import parse_qs, urlparse

import pytest

from workloads.pipeline import canary
from workloads.pipeline.steps import _canaried

REPO = Path(__file__).resolve().parents[2]
PROD = (REPO / "stacks" / "Pulumi.prod.yaml").read_text()
OWNER = "example-org/mlplat"


def _deployment(version: str | None, generation: int = 7) -> dict:
    annotations = {canary.VERSION_ANNOTATION: version} if version else {}
    return {"metadata": {"name": "triton", "generation": generation},
            "spec": {"template": {"metadata": {"labels": {"app": "triton"}, "annotations": annotations}}}}


def _rollout(**status) -> dict:
    return {"metadata": {"name": "triton"}, "status": {"workloadObservedGeneration": "7", **status}}


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
    # Argo's verdicts.
    (_rollout(phase="Healthy", stableRS="b", currentPodHash="b"), _deployment("2"), "promoted"),
    (_rollout(phase="Degraded", abort=True, message="RolloutAborted: metric failed"), _deployment("2"), "aborted"),
    (_rollout(phase="Degraded", message="ProgressDeadlineExceeded"), _deployment("2"), "aborted"),
    # An abort is an abort, whatever the phase says while the stable pods are healthy.
    (_rollout(phase="Healthy", abort=True, stableRS="a", currentPodHash="b"), _deployment("2"), "aborted"),
])
def test_the_verdict_is_argos_for_the_candidate_only(rollout, deployment, state):
    assert canary.verdict(rollout, deployment, 2)[0] == state


class _GitHub(BaseHTTPRequestHandler):
    """A repository with `main` holding prod's stack file; records every call."""

    def log_message(self, *args):
        pass

    def _answer(self, status: int, body) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self, method: str) -> None:
        state = self.server.state
        state["calls"].append((method, self.path.split("?")[0]))
        if self.headers["Authorization"] != "Bearer t0ken":
            return self._answer(401, {"message": "Bad credentials"})
        url = urlparse(self.path)
        prefix = f"/repos/{OWNER}"
        assert url.path.startswith(prefix), url.path
        path = url.path[len(prefix):]
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length)) if length else {}
        if method == "GET" and (m := re.fullmatch(r"/git/ref/heads/(.+)", path)):
            branch = state["branches"].get(m[1])
            return self._answer(200, {"object": {"sha": branch["sha"]}}) if branch else \
                self._answer(404, {"message": "Not Found"})
        if method == "POST" and path == "/git/refs":
            name = body["ref"].removeprefix("refs/heads/")
            source = next(b for b in state["branches"].values() if b["sha"] == body["sha"])
            state["branches"][name] = {"sha": f"{body['sha']}-{name}", "files": dict(source["files"])}
            return self._answer(201, {"ref": body["ref"]})
        if m := re.fullmatch(r"/contents/(.+)", path):
            if method == "GET":
                branch = state["branches"][parse_qs(url.query)["ref"][0]]
                text = branch["files"].get(m[1])
                if text is None:
                    return self._answer(404, {"message": "Not Found"})
                return self._answer(200, {"content": base64.b64encode(text.encode()).decode(), "encoding": "base64",
                                          "sha": str(hash(text))})
            branch = state["branches"][body["branch"]]
            if body.get("sha") != str(hash(branch["files"][m[1]])):
                return self._answer(409, {"message": "sha does not match"})
            branch["files"][m[1]] = base64.b64decode(body["content"]).decode()
            return self._answer(200, {"commit": {"message": body["message"]}})
        if path == "/pulls":
            if method == "GET":
                head = parse_qs(url.query)["head"][0]
                return self._answer(200, [p for p in state["pulls"] if f"{OWNER.split('/')[0]}:{p['head']}" == head])
            if any(p["head"] == body["head"] for p in state["pulls"]):
                return self._answer(422, {"message": "A pull request already exists"})
            pull = {"number": len(state["pulls"]) + 1, "head": body["head"], "base": body["base"], "state": "open",
                    "merged_at": None, "title": body["title"],
                    "html_url": f"https://github.com/{OWNER}/pull/{len(state['pulls']) + 1}"}
            state["pulls"].append(pull)
            return self._answer(201, pull)
        self._answer(404, {"message": f"no route {method} {path}"})

    def do_GET(self):  # noqa: N802
        self._route("GET")

    def do_POST(self):  # noqa: N802
        self._route("POST")

    def do_PUT(self):  # noqa: N802
        self._route("PUT")


@pytest.fixture
def github():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _GitHub)
    server.state = {"calls": [], "pulls": [],
                    "branches": {"main": {"sha": "m1", "files": {"stacks/Pulumi.prod.yaml": PROD}}}}
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.state, canary.GitHub(OWNER, "t0ken", api=f"http://127.0.0.1:{server.server_port}")
    server.shutdown()


class _Cluster:
    """The Rollout as Argo would move it: one answer a read, the last one kept."""

    def __init__(self, *answers):
        self.answers = list(answers)

    def read(self):
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def _run(github, cluster, **kw):
    clock = iter(range(0, 10**6, 60))  # a minute a read
    return canary.run(2, model="gpt", stack="prod", base="main", wait_hours=kw.pop("wait_hours", 1), github=github,
                      cluster=cluster, pipeline_run="golden-1", sleep=lambda s: None, clock=lambda: next(clock), **kw)


def test_the_change_is_asked_for_once_and_the_verdict_awaited(github):
    state, client = github
    served = (_rollout(phase="Healthy", stableRS="a", currentPodHash="a"), _deployment("1"))
    rolling = (_rollout(phase="Paused", stableRS="a", currentPodHash="b"), _deployment("2"))
    done = (_rollout(phase="Healthy", stableRS="b", currentPodHash="b"), _deployment("2"))
    cluster = _Cluster(served, served, rolling, done)
    made = _run(client, cluster)
    assert made["outcome"] == "promoted" and made["branch"] == "mlplat/canary/gpt-v2"
    assert made["pull_request"] == f"https://github.com/{OWNER}/pull/1"
    [pull] = state["pulls"]
    assert (pull["head"], pull["base"]) == ("mlplat/canary/gpt-v2", "main") and "golden-1" in pull["title"]
    edited = state["branches"]["mlplat/canary/gpt-v2"]["files"]["stacks/Pulumi.prod.yaml"]
    # One line changed: the served version; comments and layout kept; main untouched.
    changed = [(a, b) for a, b in zip(PROD.splitlines(), edited.splitlines()) if a != b]
    assert len(PROD.splitlines()) == len(edited.splitlines())
    assert [(a.strip(), b.strip()) for a, b in changed] == [("version: 1", "version: 2")]
    assert state["branches"]["main"]["files"]["stacks/Pulumi.prod.yaml"] == PROD

    # A rerun (the step's pod died after its request) finds the pull request by its branch:
    # nothing is created or written again.
    calls = len(state["calls"])
    again = _run(client, _Cluster(done))
    assert again["outcome"] == "promoted" and len(state["pulls"]) == 1
    assert {m for m, _ in state["calls"][calls:]} == {"GET"}


def test_a_rerun_after_the_branch_was_written_opens_the_pull_request_without_writing_again(github):
    state, client = github
    # The first attempt made the branch and wrote the file, then died before opening the PR.
    main = state["branches"]["main"]
    state["branches"]["mlplat/canary/gpt-v2"] = {"sha": "x", "files": {
        "stacks/Pulumi.prod.yaml": PROD.replace("    version: 1\n", "    version: 2\n")}}
    assert state["branches"]["mlplat/canary/gpt-v2"]["files"]["stacks/Pulumi.prod.yaml"] != PROD
    made = _run(client, _Cluster((_rollout(phase="Healthy", stableRS="b", currentPodHash="b"), _deployment("2"))))
    assert made["outcome"] == "promoted" and len(state["pulls"]) == 1
    assert ("PUT", f"/repos/{OWNER}/contents/stacks/Pulumi.prod.yaml") not in state["calls"]
    assert main["files"]["stacks/Pulumi.prod.yaml"] == PROD


def test_an_aborted_canary_is_reported_and_stops_the_alias(github):
    _, client = github
    aborted = _run(client, _Cluster((_rollout(phase="Degraded", abort=True, message="RolloutAborted: analysis failed"),
                                     _deployment("2"))))
    assert (aborted["outcome"], aborted["message"]) == ("aborted", "RolloutAborted: analysis failed")
    ctx = SimpleNamespace(done={"canary": aborted})
    assert _canaried(ctx) == "canary aborted: RolloutAborted: analysis failed"
    assert _canaried(SimpleNamespace(done={"canary": {**aborted, "outcome": "promoted"}})) is None
    assert _canaried(SimpleNamespace(done={"canary": {"skipped": "no canary configured"}})) is None


def test_a_declined_pull_request_ends_the_wait(github):
    state, client = github
    waiting = _Cluster((_rollout(phase="Healthy", stableRS="a", currentPodHash="a"), _deployment("1")))
    reads = []

    def read():
        reads.append(1)
        if len(reads) == 3:
            state["pulls"][0]["state"] = "closed"  # a reviewer closes it unmerged
        return waiting.read()

    made = _run(client, SimpleNamespace(read=read))
    assert made["outcome"] == "declined" and len(reads) == 3


def test_no_verdict_by_the_deadline_is_an_error_naming_the_last_state(github):
    _, client = github
    stuck = _Cluster((_rollout(phase="Paused", stableRS="a", currentPodHash="b", message="CanaryPauseStep"),
                      _deployment("2")))
    with pytest.raises(canary.CanaryError, match=r"no verdict after 1 h \(phase Paused: CanaryPauseStep\); a rerun"):
        _run(client, stuck)


def test_a_stack_that_serves_another_model_is_refused_before_anything_is_written(github):
    state, client = github
    with pytest.raises(canary.CanaryError, match="Pulumi.prod.yaml serves gpt, not churn"):
        canary.run(2, model="churn", stack="prod", base="main", wait_hours=1, github=client,
                   cluster=_Cluster((_rollout(), _deployment("1"))), pipeline_run="r", sleep=lambda s: None)
    assert not state["pulls"] and set(state["branches"]) == {"main"}
    assert {m for m, _ in state["calls"]} == {"GET"}


def test_a_refusing_github_is_one_line(github):
    _, client = github
    with pytest.raises(canary.CanaryError, match=r"^GitHub GET /pulls: 401 Bad credentials$"):
        canary.GitHub(OWNER, "wrong", api=client.api).find_pull("x")
    with pytest.raises(canary.CanaryError, match=r"^GitHub GET /pulls: ConnectionError$"):
        canary.GitHub(OWNER, "t0ken", api="http://127.0.0.1:9").find_pull("x")


def test_without_a_repository_the_change_is_asked_of_the_platform_team(capsys):
    waiting = (_rollout(phase="Healthy", stableRS="a", currentPodHash="a"), _deployment("1"))
    done = (_rollout(phase="Healthy", stableRS="b", currentPodHash="b"), _deployment("2"))
    made = _run(None, _Cluster(waiting, waiting, done))
    assert made == {"request": "python -m workloads.serve canary --stack prod --version 2", "version": 2,
                    "outcome": "promoted", "message": "version 2 is the stable version"}
    assert "asked of the platform team: python -m workloads.serve canary --stack prod --version 2" in \
        capsys.readouterr().err
