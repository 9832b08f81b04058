"""The export's comparisons, held to what they claim on answers built to differ in one
known way (`make mutate`, bench/mutate.py, found them untested): the parity check's shapes,
tolerance and top-k rules, and the int8 agreement's measures. The graph's side is a stand-in
session that answers as the model does, so each case costs milliseconds, not an export."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import workloads.serve.export as export
from workloads.serve.export import Agreement, ParityError, check_parity

VOCAB, TOP_K = 50, 5


class Linear(torch.nn.Module):
    """Next-token logits from the token ids: [batch, sequence, vocab]; position matters."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.table = torch.nn.Embedding(VOCAB, VOCAB)
        self.calls: list[tuple[int, ...]] = []

    def forward(self, ids):
        self.calls.append(tuple(ids.shape))
        return self.table(ids) * torch.arange(1, ids.shape[1] + 1).view(1, -1, 1)


class Session:
    """What ONNX Runtime answers for the exported model, optionally changed by `edit`."""

    def __init__(self, model, edit=None, top_k=TOP_K):
        self.model, self.edit, self.top_k, self.requests = model, edit, top_k, []

    def run(self, names, feed):
        ids = torch.from_numpy(feed["input_ids"])
        self.requests.append(tuple(ids.shape))
        with torch.no_grad():
            logits = self.model(ids)[:, -1, :].float()
        logprobs, top_ids = torch.topk(torch.log_softmax(logits, -1), self.top_k, -1)
        answer = {"logits": logits.numpy(), "top_k_ids": top_ids.numpy(), "top_k_logprobs": logprobs.numpy()}
        if self.edit:
            answer = self.edit(answer)
        return [answer[n] for n in names]


@pytest.fixture
def model():
    return Linear().eval()


def serve(monkeypatch, session):
    monkeypatch.setattr(export, "ort_session", lambda path, **_: session)
    return session


def test_a_faithful_graph_passes_on_each_shape_clipped_to_the_context(model, monkeypatch, tmp_path):
    session = serve(monkeypatch, Session(model))
    worst = check_parity(model, tmp_path / "m.onnx", vocab_size=VOCAB, max_sequence=10, top_k=TOP_K,
                         shapes=((3, 7), (2, 16), (1, 1)))
    assert session.requests == [(3, 7), (2, 10), (1, 1)]
    assert 0.0 <= worst <= export.PARITY_ATOL


def test_the_default_shapes_are_the_ones_the_check_runs(model, monkeypatch, tmp_path):
    session = serve(monkeypatch, Session(model))
    check_parity(model, tmp_path / "m.onnx", vocab_size=VOCAB, max_sequence=64, top_k=TOP_K)
    assert session.requests == [tuple(s) for s in export.PARITY_SHAPES]


def test_requests_are_seeded_and_the_seed_changes_them(model, monkeypatch, tmp_path):
    seen = []

    class Recording(Session):
        def run(self, names, feed):
            seen.append(feed["input_ids"].copy())
            return super().run(names, feed)

    serve(monkeypatch, Recording(model))
    for seed in (0, 0, 1):
        check_parity(model, tmp_path / "m.onnx", vocab_size=VOCAB, max_sequence=64, top_k=TOP_K, shapes=((4, 9),),
                     seed=seed)
    assert np.array_equal(seen[0], seen[1]) and not np.array_equal(seen[0], seen[2])
    assert seen[0].dtype == np.int64 and seen[0].min() >= 0 and seen[0].max() < VOCAB
    assert len(np.unique(np.concatenate(seen))) > VOCAB // 2  # ids from the whole vocabulary


def shift_logits(by):
    def edit(answer):
        answer["logits"] = answer["logits"] + by
        return answer
    return edit


@pytest.mark.parametrize("by, passes", [(0.9e-4, True), (1.1e-4, False), (float("nan"), False)])
def test_logits_are_held_to_the_tolerance(model, monkeypatch, tmp_path, by, passes):
    serve(monkeypatch, Session(model, shift_logits(by)))
    check = lambda: check_parity(model, tmp_path / "m.onnx", vocab_size=VOCAB, max_sequence=64,  # noqa: E731
                                 top_k=TOP_K, shapes=((2, 5),))
    if passes:
        assert check() == pytest.approx(by, rel=0.05)
    else:
        with pytest.raises(ParityError, match=r"^ONNX Runtime differs from PyTorch by .* \(> 0.0001\) at batch 2, "
                                              r"sequence 5$"):
            check()


def test_a_wider_tolerance_is_honoured(model, monkeypatch, tmp_path):
    serve(monkeypatch, Session(model, shift_logits(0.01)))
    assert check_parity(model, tmp_path / "m.onnx", vocab_size=VOCAB, max_sequence=64, top_k=TOP_K,
                        shapes=((2, 5),), atol=0.02) == pytest.approx(0.01, rel=0.01)


def test_log_probabilities_that_are_not_the_largest_are_refused(model, monkeypatch, tmp_path):
    def second_best(answer):  # ids and values shifted by one: each pair consistent, but not the top k
        logits = torch.from_numpy(answer["logits"])
        logprobs, ids = torch.topk(torch.log_softmax(logits, -1), TOP_K + 1, -1)
        answer["top_k_ids"], answer["top_k_logprobs"] = ids[:, 1:].numpy(), logprobs[:, 1:].numpy()
        return answer

    serve(monkeypatch, Session(model, second_best))
    with pytest.raises(ParityError, match="differs from PyTorch"):
        check_parity(model, tmp_path / "m.onnx", vocab_size=VOCAB, max_sequence=64, top_k=TOP_K, shapes=((2, 5),))


def test_ids_that_do_not_carry_their_log_probabilities_are_refused(model, monkeypatch, tmp_path):
    def reversed_ids(answer):  # the right values, with the ids in the wrong order
        answer["top_k_ids"] = answer["top_k_ids"][:, ::-1].copy()
        return answer

    serve(monkeypatch, Session(model, reversed_ids))
    with pytest.raises(ParityError, match="differs from PyTorch"):
        check_parity(model, tmp_path / "m.onnx", vocab_size=VOCAB, max_sequence=64, top_k=TOP_K, shapes=((2, 5),))


def test_each_shape_is_checked_not_only_the_first(model, monkeypatch, tmp_path):
    def wrong_for_long(answer):
        if answer["logits"].shape[0] == 8:
            answer["logits"] = answer["logits"] + 1.0
        return answer

    serve(monkeypatch, Session(model, wrong_for_long))
    with pytest.raises(ParityError, match="at batch 8, sequence 16$"):
        check_parity(model, tmp_path / "m.onnx", vocab_size=VOCAB, max_sequence=64, top_k=TOP_K)


def test_the_worst_difference_over_the_shapes_is_returned(model, monkeypatch, tmp_path):
    def by_batch(answer):
        answer["logits"] = answer["logits"] + {3: 2e-5, 8: 6e-5, 1: 1e-5}[answer["logits"].shape[0]]
        return answer

    serve(monkeypatch, Session(model, by_batch))
    assert check_parity(model, tmp_path / "m.onnx", vocab_size=VOCAB, max_sequence=64,
                        top_k=TOP_K) == pytest.approx(6e-5, rel=0.05)


@pytest.mark.parametrize("edit, said", [
    (lambda a: {**a, "top_k_ids": a["top_k_ids"][:, :3]}, r"ONNX output shapes \(2, 50\), \(2, 3\) differ from "
                                                           r"PyTorch's \(2, 50\), \(2, 5\)"),
    (lambda a: {**a, "logits": a["logits"][:1]}, r"ONNX output shapes \(1, 50\), \(2, 5\) differ"),
])
def test_outputs_of_the_wrong_shape_are_refused(model, monkeypatch, tmp_path, edit, said):
    serve(monkeypatch, Session(model, edit))
    with pytest.raises(ParityError, match=said):
        check_parity(model, tmp_path / "m.onnx", vocab_size=VOCAB, max_sequence=64, top_k=TOP_K, shapes=((2, 5),))


def test_a_runtime_failure_is_one_line_of_at_most_300_characters(model, monkeypatch, tmp_path):
    class Failing(Session):
        def run(self, names, feed):
            raise RuntimeError("x" * 400 + "\nsecond line")

    serve(monkeypatch, Failing(model))
    with pytest.raises(ParityError) as raised:
        check_parity(model, tmp_path / "m.onnx", vocab_size=VOCAB, max_sequence=64, top_k=TOP_K, shapes=((2, 5),))
    assert str(raised.value) == ("the ONNX graph fails on a request of 2 x 5 tokens, which PyTorch answers: "
                                 + "x" * 300)

    class Silent(Session):
        def run(self, names, feed):
            raise ValueError()

    serve(monkeypatch, Silent(model))
    with pytest.raises(ParityError, match=r"which PyTorch answers: ValueError$"):
        check_parity(model, tmp_path / "m.onnx", vocab_size=VOCAB, max_sequence=64, top_k=TOP_K, shapes=((2, 5),))


def test_the_model_is_compared_in_eval_mode(monkeypatch, tmp_path):
    class Dropout(Linear):
        def forward(self, ids):
            out = super().forward(ids)
            return out + (1.0 if self.training else 0.0)

    model = Dropout().train()
    serve(monkeypatch, Session(Dropout().eval()))
    check_parity(model, tmp_path / "m.onnx", vocab_size=VOCAB, max_sequence=64, top_k=TOP_K, shapes=((2, 5),))


# -- int8 agreement ------------------------------------------------------------------------


class Graph:
    """A session whose logits are a fixed function of the request."""

    def __init__(self, logits_of):
        self.logits_of, self.requests = logits_of, []

    def run(self, names, feed):
        ids = feed["input_ids"]
        self.requests.append(ids.shape)
        logits = self.logits_of(ids).astype(np.float32)
        top = np.argsort(-logits, axis=-1, kind="stable")[:, :TOP_K]
        return [{"logits": logits, "top_k_ids": top}[n] for n in names]


def reference_logits(ids):
    """Logits of a fixed random draw per request (its first and last id)."""
    return np.stack([np.random.default_rng(int(seed)).normal(size=VOCAB) * 3 for seed in ids[:, -1] * 1000 + ids[:, 0]])


def agree(monkeypatch, reference, candidate, **kwargs):
    sessions = {"ref.onnx": reference, "cand.onnx": candidate}
    monkeypatch.setattr(export, "ort_session", lambda path, **_: sessions[path.name])
    from pathlib import Path
    return export.agreement(Path("ref.onnx"), Path("cand.onnx"), vocab_size=VOCAB, max_sequence=64, top_k=TOP_K,
                            **kwargs)


def test_the_same_graph_agrees_entirely(monkeypatch):
    result = agree(monkeypatch, Graph(reference_logits), Graph(reference_logits), requests=70, tokens=9)
    assert result == Agreement(requests=70, top1=1.0, top_k_overlap=1.0, mean_kl=pytest.approx(0.0, abs=1e-6),
                               max_abs_diff=0.0)


def test_agreement_runs_every_request_in_chunks_of_32(monkeypatch):
    ref, cand = Graph(reference_logits), Graph(reference_logits)
    agree(monkeypatch, ref, cand, requests=70, tokens=100)
    assert [tuple(s) for s in ref.requests] == [(32, 64), (32, 64), (6, 64)]  # tokens clipped to the context
    assert [tuple(s) for s in cand.requests] == [tuple(s) for s in ref.requests]


def test_agreement_measures_a_known_difference(monkeypatch):
    """The candidate swaps the reference's first and sixth choice on every other request:
    top-1 agrees on half, the top 5 shares 4 of 5 ids there, and the KL divergence and the
    largest logit difference are those of the swap."""
    def swapped(ids):
        logits = reference_logits(ids)
        order = np.argsort(-logits, axis=-1, kind="stable")
        out = logits.copy()
        rows = np.arange(len(ids))[ids[:, 0] % 2 == 0]
        first, sixth = order[rows, 0], order[rows, 5]
        out[rows, first], out[rows, sixth] = logits[rows, sixth], logits[rows, first]
        return out

    ids = np.random.default_rng(1).integers(0, VOCAB, (64, 8), dtype=np.int64)
    ref, cand = reference_logits(ids), swapped(ids)
    even = ids[:, 0] % 2 == 0
    ref_lp = torch.log_softmax(torch.from_numpy(ref.astype(np.float32)), -1)
    cand_lp = torch.log_softmax(torch.from_numpy(cand.astype(np.float32)), -1)
    kl = float(torch.sum(torch.exp(ref_lp) * (ref_lp - cand_lp))) / 64

    result = agree(monkeypatch, Graph(reference_logits), Graph(swapped), requests=64, tokens=8, seed=1)
    assert result.requests == 64
    assert result.top1 == pytest.approx(1 - even.mean())
    assert result.top_k_overlap == pytest.approx(1 - even.mean() / TOP_K)
    assert result.mean_kl == pytest.approx(kl, rel=1e-4) and result.mean_kl > 0
    assert result.max_abs_diff == pytest.approx(float(np.max(np.abs(ref - cand))), rel=1e-5)
    assert result.to_dict() == {"requests": 64, "top1": result.top1, "top_k_overlap": result.top_k_overlap,
                                "mean_kl": result.mean_kl, "max_abs_diff": result.max_abs_diff}


def test_agreement_requests_are_seeded_over_the_whole_vocabulary(monkeypatch):
    seen = []

    def recording(ids):
        seen.append(ids.copy())
        return reference_logits(ids)

    for seed in (1, 1, 2):
        agree(monkeypatch, Graph(recording), Graph(reference_logits), requests=32, tokens=8, seed=seed)
    assert np.array_equal(seen[0], seen[1]) and not np.array_equal(seen[0], seen[2])
    assert seen[0].min() >= 0 and seen[0].max() < VOCAB and len(np.unique(seen[0])) > VOCAB // 2
    assert np.array_equal(seen[0], np.random.default_rng(1).integers(0, VOCAB, (32, 8), dtype=np.int64))


def test_the_thread_count_asked_for_reaches_both_sessions_and_defaults_to_the_runtimes_choice(monkeypatch):
    from pathlib import Path

    asked = []

    def session(path, **kwargs):
        asked.append((path.name, kwargs.get("intra_op_threads")))
        return Graph(reference_logits)

    monkeypatch.setattr(export, "ort_session", session)
    export.agreement(Path("ref.onnx"), Path("cand.onnx"), vocab_size=VOCAB, max_sequence=64, top_k=TOP_K,
                     requests=4, intra_op_threads=3)
    export.agreement(Path("ref.onnx"), Path("cand.onnx"), vocab_size=VOCAB, max_sequence=64, top_k=TOP_K, requests=4)
    assert asked == [("ref.onnx", 3), ("cand.onnx", 3), ("ref.onnx", 0), ("cand.onnx", 0)]  # 0: ONNX Runtime picks
