"""config.pbtxt goes through Triton's own ModelConfig protobuf and back unchanged."""

from __future__ import annotations

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from workloads.serve.spec import ModelSpec, ServeSpecError
from workloads.serve.triton_config import build_model_config, check_model_config, parse, render, round_trip


def gpu_spec(**changes) -> ModelSpec:
    return ModelSpec(**{"name": "gpt", "vocab_size": 50304, "device": "gpu", "max_batch_size": 64,
                        "preferred_batch_sizes": (16, 32, 64), "max_queue_delay_microseconds": 1500,
                        "instance_count": 2, "keep_versions": 3, **changes})


def test_round_trip_is_exact_and_says_what_we_meant():
    text = round_trip(gpu_spec())
    config = parse(text)
    assert config == build_model_config(gpu_spec())
    assert (config.name, config.backend, config.max_batch_size) == ("gpt", "onnxruntime", 64)
    assert list(config.dynamic_batching.preferred_batch_size) == [16, 32, 64]
    assert config.dynamic_batching.max_queue_delay_microseconds == 1500
    assert config.version_policy.WhichOneof("policy_choice") == "latest"
    assert config.version_policy.latest.num_versions == 3
    [group] = config.instance_group
    assert (group.kind, group.count) == (mc.ModelInstanceGroup.KIND_GPU, 2)
    [inp] = config.input
    # The batch axis is implicit (max_batch_size > 0); sequence stays dynamic on the way in,
    # and the answer is the next token's only.
    assert (inp.name, inp.data_type, list(inp.dims)) == ("input_ids", mc.TYPE_INT64, [-1])
    assert [(o.name, o.data_type, list(o.dims)) for o in config.output] == [
        ("logits", mc.TYPE_FP32, [50304]), ("top_k_ids", mc.TYPE_INT64, [16]), ("top_k_logprobs", mc.TYPE_FP32, [16])]
    # No accelerator unless asked: ONNX Runtime's CUDA provider.
    assert not config.optimization.execution_accelerators.gpu_execution_accelerator


def test_tensorrt_fp16_reaches_the_config_with_a_profile_spanning_every_batch():
    config = parse(round_trip(gpu_spec(accelerator="tensorrt", precision="fp16", max_sequence=1024, top_k=5)))
    [trt] = config.optimization.execution_accelerators.gpu_execution_accelerator
    assert trt.name == "tensorrt"
    assert dict(trt.parameters) == {
        "precision_mode": "FP16", "max_workspace_size_bytes": "1073741824", "trt_layer_norm_fp32_fallback": "1",
        "trt_profile_min_shapes": "input_ids:1x1", "trt_profile_opt_shapes": "input_ids:64x128",
        "trt_profile_max_shapes": "input_ids:64x1024"}
    assert [list(o.dims) for o in config.output] == [[50304], [5], [5]]
    fp32 = parse(round_trip(gpu_spec(accelerator="tensorrt", max_sequence=1024)))
    assert fp32.optimization.execution_accelerators.gpu_execution_accelerator[0].parameters["precision_mode"] == "FP32"


@pytest.mark.parametrize("changes, key, message", [
    ({"device": "cpu", "instance_count": 1, "accelerator": "tensorrt"}, "accelerator",
     "'tensorrt' runs on GPUs only; use 'none' on CPU"),
    ({"precision": "int8"}, "precision", "'int8' is ONNX Runtime's dynamic quantization for CPUs; on GPUs use "
                                         "'fp16' with the 'tensorrt' accelerator"),
    ({"precision": "fp16"}, "precision", "'fp16' is TensorRT's FP16 mode: set the accelerator to 'tensorrt' "
                                         "(GPU only)"),
    ({"precision": "bf8"}, "precision", "precision 'bf8' is not allowed; allowed: fp32, int8, fp16"),
    ({"top_k": 0}, "topK", "top-k 0 is out of range; use 1 to the vocabulary size 50304"),
    ({"top_k": 50305}, "topK", "top-k 50305 is out of range; use 1 to the vocabulary size 50304"),
])
def test_contracts_a_device_cannot_serve_are_refused(changes, key, message):
    with pytest.raises(ServeSpecError) as err:
        gpu_spec(**changes)
    assert (err.value.key, str(err.value)) == (key, message)


def test_a_hand_edited_accelerator_on_cpu_is_refused():
    text = round_trip(gpu_spec(accelerator="tensorrt")).replace("KIND_GPU", "KIND_CPU")
    with pytest.raises(ServeSpecError, match=r"gpt: gpu_execution_accelerator 'tensorrt': 'tensorrt' runs on GPUs only"):
        check_model_config(parse(text), "gpt")


def test_cpu_config_uses_cpu_instances():
    config = parse(round_trip(gpu_spec(device="cpu", instance_count=1)))
    assert [g.kind for g in config.instance_group] == [mc.ModelInstanceGroup.KIND_CPU]


def test_cpu_threads_become_the_onnxruntime_parameter():
    config = parse(round_trip(gpu_spec(device="cpu", instance_count=1, intra_op_threads=2)))
    assert config.parameters["intra_op_thread_count"].string_value == "2"
    assert "intra_op_thread_count" not in parse(round_trip(gpu_spec())).parameters


def test_typo_fails_at_parse_with_its_place():
    text = round_trip(gpu_spec()).replace("max_batch_size", "max_batch_sise")
    with pytest.raises(ServeSpecError) as err:
        parse(text, "repo/gpt/config.pbtxt")
    line = text.splitlines().index("max_batch_sise: 64") + 1
    assert str(err.value) == (f'repo/gpt/config.pbtxt: {line}:1 : Message type "inference.ModelConfig" '
                              'has no field named "max_batch_sise".')


def test_bad_enum_and_negative_delay_fail_at_parse():
    text = round_trip(gpu_spec())
    with pytest.raises(ServeSpecError, match="KIND_TPU"):
        parse(text.replace("KIND_GPU", "KIND_TPU"))
    # The delay is an unsigned field: a negative value cannot even be parsed.
    with pytest.raises(ServeSpecError, match="max_queue_delay_microseconds"):
        parse(text.replace("max_queue_delay_microseconds: 1500", "max_queue_delay_microseconds: -5"))


def hand_edited(edit) -> mc.ModelConfig:
    config = build_model_config(gpu_spec())
    edit(config)
    return parse(render(config))


@pytest.mark.parametrize("edit, message", [
    (lambda c: c.dynamic_batching.preferred_batch_size.append(128),
     "preferred batch size 128 is above the max batch size 64; use sizes from 1 to 64"),
    (lambda c: c.ClearField("instance_group"), "gpt: config has no instance group"),
    (lambda c: c.ClearField("version_policy"), "gpt: config has no version policy"),
    (lambda c: setattr(c, "name", "my gpt"), "config name 'my gpt' does not match its directory 'gpt'"),
    (lambda c: c.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=1),
     "gpt: instance groups must all be KIND_GPU or all KIND_CPU"),
])
def test_hand_edited_configs_are_checked_as_triton_would(edit, message):
    with pytest.raises(ServeSpecError) as err:
        check_model_config(hand_edited(edit), directory="gpt")
    assert str(err.value) == message


def test_generated_config_passes_the_check():
    check_model_config(parse(round_trip(gpu_spec())), directory="gpt")


def test_the_context_length_and_warmup_reach_the_config():
    config = parse(round_trip(gpu_spec(max_sequence=1024)))
    assert config.parameters["max_sequence"].string_value == "1024"
    single, largest = config.model_warmup
    assert (single.batch_size, largest.batch_size) == (1, 64)  # one request alone, the largest preferred batch
    for warmup in (single, largest):
        [(name, tensor)] = warmup.inputs.items()
        # Warmed at 128 tokens, not the full context: no full-context all-position logits at load.
        assert (name, tensor.data_type, list(tensor.dims), tensor.zero_data) == ("input_ids", mc.TYPE_INT64,
                                                                                 [128], True)
    short = parse(round_trip(gpu_spec(max_sequence=64)))
    assert {list(t.dims)[0] for w in short.model_warmup for t in w.inputs.values()} == {64}
    assert "max_sequence" not in parse(round_trip(gpu_spec())).parameters


@pytest.mark.parametrize(("edit", "expected"), [
    (lambda c: c.model_warmup[0].inputs["input_ids"].dims.__setitem__(0, 4096),
     "warmup 'single-request' sends [4096] tokens, above the model's 1024"),
    (lambda c: setattr(c.model_warmup[1], "batch_size", 128),
     "warmup 'largest-preferred-batch' asks for batch 128, above max_batch_size 64"),
    (lambda c: c.parameters["max_sequence"].__setattr__("string_value", "long"),
     "parameter max_sequence is 'long', not a number of tokens"),
])
def test_a_hand_edited_warmup_triton_would_refuse_is_named(edit, expected):
    config = build_model_config(gpu_spec(max_sequence=1024))
    edit(config)
    with pytest.raises(ServeSpecError, match=expected.replace("[", r"\[").replace("]", r"\]")):
        check_model_config(parse(render(config)), "gpt")
