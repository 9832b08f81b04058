"""`config.pbtxt` built as Triton's own `ModelConfig` protobuf, rendered and parsed back.

Building the message through the generated class (from `tritonclient`) means a misspelt
field fails here with the protobuf's own error; parsing the rendered text back proves the
file Triton will read says exactly what we meant.
"""

from __future__ import annotations

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from workloads.serve.spec import (
    INPUT_NAME,
    OUTPUT_NAME,
    TOP_K_IDS,
    TOP_K_LOGPROBS,
    ModelSpec,
    ServeSpecError,
    check_contract,
    check_serving,
)

BACKEND = "onnxruntime"
MODEL_FILENAME = "model.onnx"
CONFIG_FILENAME = "config.pbtxt"

_KINDS = {"gpu": mc.ModelInstanceGroup.KIND_GPU, "cpu": mc.ModelInstanceGroup.KIND_CPU}
# Triton bounds no variable dimension, so the model's context length travels in the config
# as a parameter (the ONNX Runtime backend ignores keys it does not know) for clients and
# the checks below to read.
MAX_SEQUENCE = "max_sequence"
# Warmup requests are this long at most: enough to build the kernels and allocate the
# arenas a real request needs, without a full-context request's all-position logits.
WARMUP_TOKENS = 128
# TensorRT: the GPU memory an engine build may use for scratch.
TENSORRT_WORKSPACE_BYTES = 1 << 30


def warmups(spec: ModelSpec) -> list[mc.ModelWarmup]:
    """What Triton runs before it marks the model ready, so the first real requests do not
    pay for graph optimisation and memory allocation: one request alone, and the largest
    batch the batcher prefers."""
    length = min(spec.max_sequence, WARMUP_TOKENS) if spec.max_sequence > 0 else WARMUP_TOKENS
    shapes = (("single-request", 1), ("largest-preferred-batch", max(spec.preferred_batch_sizes)))
    return [mc.ModelWarmup(name=name, batch_size=batch, count=1, inputs={
        INPUT_NAME: mc.ModelWarmup.Input(data_type=mc.TYPE_INT64, dims=[length], zero_data=True)})
        for name, batch in shapes]


def outputs(spec: ModelSpec) -> list[mc.ModelOutput]:
    """The next token's logits and its top-k; a client names the ones it wants."""
    return [mc.ModelOutput(name=OUTPUT_NAME, data_type=mc.TYPE_FP32, dims=[spec.vocab_size]),
            mc.ModelOutput(name=TOP_K_IDS, data_type=mc.TYPE_INT64, dims=[spec.top_k]),
            mc.ModelOutput(name=TOP_K_LOGPROBS, data_type=mc.TYPE_FP32, dims=[spec.top_k])]


def tensorrt(spec: ModelSpec) -> mc.ModelOptimizationPolicy.ExecutionAccelerators.Accelerator:
    """ONNX Runtime's TensorRT provider, as Triton's ONNX Runtime backend takes it. The
    optimisation profile spans every shape the batcher can form (1 x 1 up to max batch x
    context), so no request falls outside the engine; the optimum is the largest preferred
    batch at the warmup length. No engine cache: a pod's disk does not outlive it, and the
    warmup builds the engine before the model is marked ready."""
    longest = spec.max_sequence if spec.max_sequence > 0 else WARMUP_TOKENS
    typical = min(longest, WARMUP_TOKENS)
    parameters = {
        "precision_mode": "FP16" if spec.precision == "fp16" else "FP32",
        "max_workspace_size_bytes": str(TENSORRT_WORKSPACE_BYTES),
        "trt_profile_min_shapes": f"{INPUT_NAME}:1x1",
        "trt_profile_opt_shapes": f"{INPUT_NAME}:{max(spec.preferred_batch_sizes)}x{typical}",
        "trt_profile_max_shapes": f"{INPUT_NAME}:{spec.max_batch_size}x{longest}",
        # Layer norms in fp32 keep an FP16 engine's logits close to fp32's.
        "trt_layer_norm_fp32_fallback": "1",
    }
    return mc.ModelOptimizationPolicy.ExecutionAccelerators.Accelerator(name="tensorrt", parameters=parameters)


def build_model_config(spec: ModelSpec) -> mc.ModelConfig:
    """The ModelConfig for a token-id -> next-token model exported with dynamic batch and
    sequence axes. Dims leave out the batch axis, as Triton expects when max_batch_size > 0."""
    config = mc.ModelConfig(
        name=spec.name,
        backend=BACKEND,
        max_batch_size=spec.max_batch_size,
        default_model_filename=MODEL_FILENAME,
        version_policy=mc.ModelVersionPolicy(
            latest=mc.ModelVersionPolicy.Latest(num_versions=spec.keep_versions)
        ),
        input=[mc.ModelInput(name=INPUT_NAME, data_type=mc.TYPE_INT64, dims=[-1])],
        output=outputs(spec),
        dynamic_batching=mc.ModelDynamicBatching(
            preferred_batch_size=list(spec.preferred_batch_sizes),
            max_queue_delay_microseconds=spec.max_queue_delay_microseconds,
        ),
        instance_group=[
            mc.ModelInstanceGroup(name=f"{spec.name}-{spec.device}", kind=_KINDS[spec.device],
                                  count=spec.instance_count)
        ],
    )
    if spec.intra_op_threads:
        # The ONNX Runtime backend's per-model thread setting.
        config.parameters["intra_op_thread_count"].string_value = str(spec.intra_op_threads)
    if spec.max_sequence > 0:
        config.parameters[MAX_SEQUENCE].string_value = str(spec.max_sequence)
    config.model_warmup.extend(warmups(spec))
    if spec.accelerator == "tensorrt":
        config.optimization.execution_accelerators.gpu_execution_accelerator.append(tensorrt(spec))
    return config


def max_sequence(config: mc.ModelConfig) -> int | None:
    """The model's context length as its config records it, or None."""
    value = config.parameters[MAX_SEQUENCE].string_value if MAX_SEQUENCE in config.parameters else ""
    return int(value) if value.isdigit() else None


def render(config: mc.ModelConfig) -> str:
    """The text Triton reads from config.pbtxt."""
    return text_format.MessageToString(config)


def parse(text: str, source: str = CONFIG_FILENAME) -> mc.ModelConfig:
    """Parse config.pbtxt text into a ModelConfig; a typo is one line naming the place."""
    config = mc.ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as err:
        raise ServeSpecError("config", f"{source}: {err}") from None
    return config


def check_model_config(config: mc.ModelConfig, directory: str | None = None) -> None:
    """Triton's own load-time rules for the settings we generate, for a config that may
    have been edited by hand. `directory` is the model's directory name, which Triton
    requires the config's name to match."""
    if directory is not None and config.name != directory:
        raise ServeSpecError(
            "modelName", f"config name {config.name!r} does not match its directory {directory!r}"
        )
    if not config.instance_group:
        raise ServeSpecError("instanceCount", f"{config.name}: config has no instance group")
    if not config.HasField("version_policy"):
        raise ServeSpecError("keepVersions", f"{config.name}: config has no version policy")
    kinds = {group.kind for group in config.instance_group}
    if len(kinds) != 1 or not kinds <= set(_KINDS.values()):
        raise ServeSpecError("device", f"{config.name}: instance groups must all be KIND_GPU or all KIND_CPU")
    if MAX_SEQUENCE in config.parameters and max_sequence(config) is None:
        raise ServeSpecError("maxSequence", f"{config.name}: parameter {MAX_SEQUENCE} is "
                             f"{config.parameters[MAX_SEQUENCE].string_value!r}, not a number of tokens")
    longest = max_sequence(config)
    for warmup in config.model_warmup:
        if warmup.batch_size > max(config.max_batch_size, 1):
            raise ServeSpecError("maxBatchSize", f"{config.name}: warmup {warmup.name!r} asks for batch "
                                 f"{warmup.batch_size}, above max_batch_size {config.max_batch_size}")
        for name, tensor in warmup.inputs.items():
            if name not in {i.name for i in config.input}:
                raise ServeSpecError("config", f"{config.name}: warmup {warmup.name!r} feeds {name!r}, which is "
                                     "not an input of the model")
            if longest is not None and any(d > longest for d in tensor.dims):
                raise ServeSpecError("maxSequence", f"{config.name}: warmup {warmup.name!r} sends "
                                     f"{list(tensor.dims)} tokens, above the model's {longest}; Triton would "
                                     "fail to load it")
    device = next(d for d, k in _KINDS.items() if k in kinds)
    accelerators = config.optimization.execution_accelerators.gpu_execution_accelerator
    for accelerator in accelerators:
        precision = accelerator.parameters.get("precision_mode", "FP32").lower()
        try:
            check_contract(device=device, top_k=1, precision=precision, accelerator=accelerator.name)
        except ServeSpecError as err:
            raise ServeSpecError(err.key, f"{config.name}: gpu_execution_accelerator {accelerator.name!r}: {err}") \
                from None
    policy = config.version_policy
    keep = policy.latest.num_versions if policy.WhichOneof("policy_choice") == "latest" else 1
    check_serving(
        model_name=config.name,
        device=device,
        max_batch_size=config.max_batch_size,
        preferred_batch_sizes=tuple(config.dynamic_batching.preferred_batch_size),
        max_queue_delay_microseconds=config.dynamic_batching.max_queue_delay_microseconds,
        instance_count=min(group.count for group in config.instance_group),
        keep_versions=keep,
    )


def _signature(config: mc.ModelConfig) -> str:
    tensors = [*config.input, *config.output]
    return "; ".join(f"{t.name} {mc.DataType.Name(t.data_type).removeprefix('TYPE_')} {list(t.dims)}"
                     for t in tensors) + f"; max batch {'on' if config.max_batch_size else 'off'}"


def signature_change(published: str, new: str, source: str = CONFIG_FILENAME) -> str:
    """How `new`'s tensors differ from the published config's, or "" when they agree.
    Triton reads one config per model for all its versions, so a version whose tensors
    differ would leave the versions kept beside it unloadable."""
    before, after = _signature(parse(published, source)), _signature(parse(new))
    return "" if before == after else f"the published config has {before}; this version needs {after}"


def round_trip(spec: ModelSpec) -> str:
    """Render the spec's config, parse it back, and insist nothing changed on the way."""
    config = build_model_config(spec)
    text = render(config)
    parsed = parse(text)
    if parsed != config:
        raise ServeSpecError("config", f"{spec.name}: config.pbtxt does not parse back to the same ModelConfig")
    check_model_config(parsed, spec.name)
    return text
