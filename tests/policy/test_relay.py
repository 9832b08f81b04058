"""The relay that sends the preview's Analyze requests to the pack from its own process."""

from __future__ import annotations

import io
import os
import threading

import pytest
from google.protobuf import struct_pb2
from pulumi.runtime.proto import analyzer_pb2

from infra.preview.analyzer import PackError, PolicyPackProcess, StreamingAnalysis
from infra.preview.mocks import Registration
from infra.preview.relay import FrameWriter, _field, read_frame, write_frame

PROVIDER = "urn:pulumi:t::p::pulumi:providers:aws::p"


def _reg(name: str, properties: dict, *, type_: str = "aws:s3/bucket:Bucket", parent: str = "",
         dependencies: list[str] | None = None) -> Registration:
    struct = struct_pb2.Struct()
    struct.update(properties)
    return Registration(urn=f"urn:pulumi:t::p::{type_}::{name}", type=type_, name=name, parent=parent, custom=True,
                        provider_ref=f"{PROVIDER}::id" if not type_.startswith("pulumi:") else "",
                        properties=struct, dependencies=dependencies or [], property_dependencies={"bucket": [PROVIDER]},
                        protect=True, retain_on_delete=False)


def test_a_request_followed_by_the_stack_fields_is_the_stack_resource():
    provider = _reg("p", {"region": "me-central-1"}, type_="pulumi:providers:aws")
    analysis = StreamingAnalysis.__new__(StreamingAnalysis)
    analysis.providers = {PROVIDER: provider}
    reg = _reg("logs", {"bucket": "logs", "tags": {"a": "b"}}, parent="urn:pulumi:t::p::c:C::c", dependencies=[PROVIDER])

    joined = analysis._analyze_request(reg).SerializeToString() + analysis._stack_fields(reg).SerializeToString()
    resource = analyzer_pb2.AnalyzerResource.FromString(joined)

    assert (resource.type, resource.urn, resource.name) == (reg.type, reg.urn, "logs")
    assert resource.properties == reg.properties
    assert resource.options.protect and resource.options.parent == reg.parent
    assert resource.provider.urn == PROVIDER and resource.provider.properties["region"] == "me-central-1"
    assert resource.parent == reg.parent and list(resource.dependencies) == [PROVIDER]
    assert list(resource.propertyDependencies["bucket"].urns) == [PROVIDER]
    stack = analyzer_pb2.AnalyzeStackRequest.FromString(_field(1, joined) + _field(1, joined))
    assert [r.urn for r in stack.resources] == [reg.urn, reg.urn]
    big = b"x" * 300_000  # a length that takes a three-byte varint
    assert struct_pb2.Value.FromString(_field(3, big)).string_value == big.decode()


def test_frames_round_trip_and_a_cut_frame_reads_as_the_end():
    stream = io.BytesIO()
    write_frame(stream, b"A", b"urn\nbody")
    write_frame(stream, b"F", b"")
    stream.seek(0)
    assert read_frame(stream) == (b"A", b"urn\nbody")
    assert read_frame(stream) == (b"F", b"")
    assert read_frame(stream) is None
    assert read_frame(io.BytesIO(stream.getvalue()[:7])) is None


def test_a_helper_that_reads_slowly_never_blocks_the_thread_that_queues():
    read_fd, write_fd = os.pipe()
    with open(read_fd, "rb") as reader:
        writer = FrameWriter(open(write_fd, "wb"), prelude=lambda: [(b"P", b"port")])
        payloads = [bytes([i]) * 100_000 for i in range(40)]  # 4 MB: sixty times what a pipe holds
        queued = threading.Event()

        def queue_all() -> None:
            for payload in payloads:
                writer.put(b"A", payload)
            writer.close()
            queued.set()

        threading.Thread(target=queue_all, daemon=True).start()
        assert queued.wait(timeout=10), "put() waited on a pipe nobody read"
        frames = []
        while (frame := read_frame(reader)) is not None:  # the end: the writer closed the stream
            frames.append(frame)
        writer.join()
    assert frames == [(b"P", b"port"), *[(b"A", p) for p in payloads]]
    assert writer.error is None


def test_a_failed_prelude_or_a_gone_helper_is_kept_for_the_caller():
    read_fd, write_fd = os.pipe()
    with open(read_fd, "rb") as reader:
        def prelude():
            raise PackError("no pack")

        writer = FrameWriter(open(write_fd, "wb"), prelude=prelude)
        writer.put(b"A", b"dropped")
        writer.close()
        writer.join()
        assert writer.started.is_set() and isinstance(writer.error, PackError)
        assert read_frame(reader) is None  # nothing written after a failed prelude

    read_fd, write_fd = os.pipe()
    os.close(read_fd)  # the helper exited
    writer = FrameWriter(open(write_fd, "wb"))
    writer.put(b"A", b"x")
    writer.close()
    writer.join()
    assert isinstance(writer.error, BrokenPipeError)


def test_verdicts_come_back_through_the_relay_for_each_resource_and_the_stack():
    pack = PolicyPackProcess()
    try:
        policies = pack.info()
        pack.configure(policies, {}, "test")
        provider = _reg("p", {"region": "me-central-1"}, type_="pulumi:providers:aws")
        bad = _reg("bad", {"bucket": "bad", "region": "eu-west-1"})
        analysis = StreamingAnalysis(pack, {PROVIDER: provider}, lambda: policies)
        try:
            for reg in (provider, bad):
                analysis.submit(reg)
            verdict = analysis.finish([provider, bad])
        finally:
            analysis.close()
    finally:
        pack.close()
    residency = [v for v in verdict.violations if v.policy == "aws-resources-in-allowed-regions"]
    assert [(v.urn, v.level) for v in residency] == [(bad.urn, "mandatory")]
    assert "eu-west-1" in residency[0].message
    assert bad.urn in verdict.checked["aws-resources-in-allowed-regions"]


def test_a_pack_that_dies_mid_preview_is_one_error_line():
    pack = PolicyPackProcess()
    try:
        policies = pack.info()
        pack.configure(policies, {}, "test")
        analysis = StreamingAnalysis(pack, {}, lambda: policies)
        try:
            analysis.submit(_reg("first", {"bucket": "first"}))
            pack._proc.kill()
            pack._proc.wait()
            analysis.submit(_reg("second", {"bucket": "second"}))
            with pytest.raises(PackError) as raised:
                analysis.finish([])
        finally:
            analysis.close()
    finally:
        pack.close()
    message = str(raised.value)
    assert message.startswith("the policy pack failed: UNAVAILABLE"), message
    assert "\n" not in message


def test_a_program_that_raises_leaves_no_process_behind(monkeypatch):
    import pulumi_aws as aws

    from infra.config import ConfigError, load_stack
    from infra.preview import analyzer, engine

    started: list = []
    real_popen = analyzer.subprocess.Popen

    def recording_popen(*args, **kwargs):
        process = real_popen(*args, **kwargs)
        started.append(process)
        return process

    monkeypatch.setattr(analyzer.subprocess, "Popen", recording_popen)

    def program(config):
        provider = aws.Provider("p", region=config.region)
        for name in ("a", "b", "c"):
            aws.s3.Bucket(name, opts=__import__("pulumi").ResourceOptions(provider=provider))
        raise ConfigError("stacks/Pulumi.dev.yaml: mlplat:x: bad")

    with pytest.raises(Exception) as raised:
        engine.run_preview("dev", program=program, config=load_stack("dev"))
    assert not isinstance(raised.value, BrokenPipeError), raised.value
    assert len(started) == 2  # the pack and the relay
    assert all(process.poll() is not None for process in started), [p.args for p in started]


def test_both_layers_share_one_pack_and_are_judged_as_each_alone(monkeypatch):
    from infra.preview import analyzer, engine
    from tests.conftest import preview

    started: list = []
    real_popen = analyzer.subprocess.Popen

    def recording_popen(args, *rest, **kwargs):
        process = real_popen(args, *rest, **kwargs)
        started.append(args)
        return process

    monkeypatch.setattr(analyzer.subprocess, "Popen", recording_popen)
    together = engine.run_environment("dev")

    packs = [args for args in started if args[1:3] == ["-m", "pulumi.policy"]]
    assert len(packs) == 1, started
    for result, alone in zip(together, (preview("dev"), preview("dev-cluster"))):
        assert result.stack == alone.stack
        assert sorted(map(repr, result.verdict.violations)) == sorted(map(repr, alone.verdict.violations))
        assert result.verdict.checked == alone.verdict.checked and result.verdict.checked
        assert sorted(result.engine_errors) == sorted(alone.engine_errors)
