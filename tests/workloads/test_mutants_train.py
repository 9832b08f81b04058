"""The training package's edges that `make mutate` (bench/mutate.py) found untested: MFU on
one GPU and at exactly the peak, and the error for a machine without a GPU."""

from __future__ import annotations

import pytest

from workloads.train.metrics import catalog_peak_tflops, model_flops_utilisation


def test_one_gpu_has_an_mfu_and_no_gpu_has_none():
    assert model_flops_utilisation(1e6, 3.9e9, num_gpus=1, peak_tflops=989.0) == pytest.approx(3.9e15 / 989e12)
    assert model_flops_utilisation(1e6, 3.9e9, num_gpus=0, peak_tflops=989.0) is None


def test_running_at_the_peak_is_exactly_one():
    # 2 GPUs of 1 TFLOPS, 2e12 FLOP/s achieved: the whole peak, with no rounding to hide.
    assert model_flops_utilisation(2e6, 1e6, num_gpus=2, peak_tflops=1.0) == 1.0


def test_an_instance_without_a_gpu_is_refused_by_name():
    with pytest.raises(ValueError, match=r"^c7i.2xlarge has no GPU$"):
        catalog_peak_tflops("c7i.2xlarge")


def test_the_7b_preset_is_gpt3_6_7b_with_gpt2s_vocabulary_padded():
    """GPT-3 6.7B (Brown et al. 2020, table 2.1): 32 layers of 4096 wide, 32 heads, a 2048-token
    context; its vocabulary is GPT-2's 50,257 tokens padded to a multiple of 64 for the
    matrix units."""
    from workloads.train.shapes import GPTConfig

    config = GPTConfig.gpt_6_7b()
    assert (config.n_layer, config.n_embd, config.n_head, config.block_size) == (32, 4096, 32, 2048)
    assert config.vocab_size == -(-50257 // 64) * 64


def test_the_gpt2_and_gpt3_xl_presets_have_their_published_shapes():
    """GPT-2 small: 12 layers of 768, 12 heads, 1024 tokens. GPT-3 XL: 24 layers of 2048, a
    2048-token context. Both on GPT-2's vocabulary padded to a multiple of 64."""
    from workloads.train.shapes import GPTConfig

    small, xl = GPTConfig.gpt2_124m(), GPTConfig.gpt_1_3b()
    assert (small.n_layer, small.n_embd, small.n_head, small.block_size) == (12, 768, 12, 1024)
    assert (xl.n_layer, xl.n_embd, xl.block_size) == (24, 2048, 2048) and xl.n_embd % xl.n_head == 0
    assert small.vocab_size == xl.vocab_size == -(-50257 // 64) * 64


def test_a_layout_is_described_with_its_schedule_only_where_it_pipelines():
    from workloads.train.shapes import Layout

    assert Layout().describe(8) == "dp_replicate=1 dp_shard=8 tp=1 pp=1"
    assert Layout(tp=2, pp=2, dp_replicate=1, pp_schedule="gpipe").describe(8) == \
        "dp_replicate=1 dp_shard=2 tp=2 pp=2 (gpipe)"
    assert Layout(pp=4).describe(8) == "dp_replicate=1 dp_shard=2 tp=1 pp=4 (1f1b)"


def test_the_metrics_file_is_made_folders_deep_and_each_line_is_readable_at_once(tmp_path):
    """A resumed run's reader (and `kubectl logs`) sees each line when it is written, not at close."""
    import io
    import json

    from workloads.train.metrics import MetricsWriter

    class Stream(io.StringIO):
        flushes = 0

        def flush(self):
            Stream.flushes += 1
            super().flush()

    path = tmp_path / "a" / "b" / "metrics.jsonl"
    stream = Stream()
    writer = MetricsWriter(path, stream=stream)
    writer.write("step", step=3, loss=1.5, alpha=0.1)
    line = path.read_text()  # before close
    assert list(json.loads(line)) == ["event", "step", "loss", "alpha"]  # the order written in
    assert stream.flushes >= 1 and stream.getvalue() == line
    writer.close()
    writer.close()  # twice is harmless


def test_a_writer_without_a_file_only_echoes():
    import io

    from workloads.train.metrics import MetricsWriter

    out = io.StringIO()
    writer = MetricsWriter(None, stream=out)
    writer.write("step", step=1)
    writer.close()
    assert out.getvalue() == '{"event": "step", "step": 1}\n'
