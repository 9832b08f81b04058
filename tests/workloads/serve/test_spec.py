"""Serving settings Triton would refuse are refused here first, in one line."""

from __future__ import annotations

import pytest

from workloads.serve.spec import ModelSpec, ServeSpecError, check_serving, gpu_refusal

GOOD = dict(model_name="gpt", device="gpu", max_batch_size=32, preferred_batch_sizes=(8, 16),
            max_queue_delay_microseconds=500, instance_count=1, keep_versions=2)


def refused(**changes) -> ServeSpecError:
    with pytest.raises(ServeSpecError) as err:
        check_serving(**{**GOOD, **changes})
    assert "\n" not in str(err.value)
    return err.value


def test_good_settings_pass():
    check_serving(**GOOD)
    spec = ModelSpec(name="gpt-small_v2.1", vocab_size=256, device="cpu", max_queue_delay_microseconds=0)
    assert spec.preferred_batch_sizes == (8, 16, 32) and spec.keep_versions == 2


@pytest.mark.parametrize("name", ["my model", "", "../escape", "a/b", ".hidden", "-dash", "x" * 64, "gpt\n",
                                  # Kubernetes label values end in a letter or digit.
                                  "gpt-", "gpt_", "gpt."])
def test_model_names_triton_or_kubernetes_cannot_take(name):
    err = refused(model_name=name)
    assert err.key == "modelName"
    assert str(err) == (f"model name {name!r} is not servable: use 1-63 letters, digits, '_', '-' or '.', "
                        "starting and ending with a letter or digit (it is a directory, a URL path segment and a "
                        "Kubernetes label value)")


@pytest.mark.parametrize("name", ["g", "x" * 63, "gpt-small_v2.1"])
def test_model_names_at_the_limits(name):
    check_serving(**{**GOOD, "model_name": name})


def test_preferred_batch_size_above_max():
    err = refused(max_batch_size=16, preferred_batch_sizes=(8, 32))
    assert (err.key, str(err)) == (
        "preferredBatchSizes", "preferred batch size 32 is above the max batch size 16; use sizes from 1 to 16")


def test_preferred_batch_size_must_be_positive_and_distinct():
    assert str(refused(preferred_batch_sizes=(0, 8))) == "preferred batch size 0 must be positive"
    assert str(refused(preferred_batch_sizes=(8, 8))) == "preferred batch sizes [8, 8] repeat a size"
    assert str(refused(preferred_batch_sizes=())) == "preferred batch sizes must list at least one size"


def test_negative_queue_delay():
    err = refused(max_queue_delay_microseconds=-1)
    assert (err.key, str(err)) == (
        "maxQueueDelayMicroseconds", "max queue delay -1 us is below zero; use 0 or more microseconds")


def test_gpu_where_none_is_allowed():
    reason = gpu_refusal("smb", ["system", "cpu"])
    err = refused(gpu_allowed=False, gpu_refusal=reason)
    assert (err.key, str(err)) == (
        "device", "'gpu' is not available: the smb stack is CPU-only; use 'cpu' (ONNX Runtime on the CPU pool)")
    check_serving(**{**GOOD, "device": "cpu"}, gpu_allowed=False, gpu_refusal=reason)


def test_gpu_refusal_reasons():
    assert gpu_refusal("prod", ["system", "gpu", "inference"]) == ""
    assert "no" in gpu_refusal("dev", ["system", "gpu"]) and "'inference'" in gpu_refusal("dev", ["gpu"])
    # smb stays CPU-only even if someone adds an inference pool to it.
    assert gpu_refusal("smb", ["inference"]).startswith("the smb stack is CPU-only")


@pytest.mark.parametrize("changes, key", [
    ({"device": "tpu"}, "device"), ({"max_batch_size": 0}, "maxBatchSize"), ({"instance_count": 0}, "instanceCount"),
    ({"keep_versions": 0}, "keepVersions"),
])
def test_other_refusals_name_their_key(changes, key):
    assert refused(**changes).key == key


def test_model_spec_checks_itself():
    with pytest.raises(ServeSpecError, match="above the max batch size 4"):
        ModelSpec(name="gpt", vocab_size=256, max_batch_size=4)
    with pytest.raises(ServeSpecError, match="vocabulary size 0"):
        ModelSpec(name="gpt", vocab_size=0)
