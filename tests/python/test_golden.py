"""Training checkpoints that earlier builds saved (testdata/golden/, see its README and
tests/golden.rs): a PyTorch user's checkpoint holds ``loader.state_dict()``, the same
fields the Rust loader's state serializes, so each build's saved state must resume a
Python loader to the batches that build gave then."""

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import stoker

GOLDEN = Path(__file__).resolve().parents[2] / "testdata" / "golden"
CHECKPOINTS = sorted(GOLDEN.glob("v*/checkpoint.json"))


def test_every_golden_folder_has_a_checkpoint():
    assert [p.parent.name for p in CHECKPOINTS] == sorted(
        p.name for p in GOLDEN.glob("v*") if p.is_dir()
    )
    assert len(CHECKPOINTS) >= 4


@pytest.mark.parametrize("path", CHECKPOINTS, ids=lambda p: p.parent.name)
def test_a_checkpoint_an_earlier_build_saved_resumes_a_python_loader(path):
    saved = json.loads(path.read_text())
    state = saved["state"]
    # The loader tests/golden.rs saved them from: shuffled whole, random crops, no flip.
    loader = stoker.Loader(
        path.parent / "jpeg", 3, shuffle="global", seed=7, crop="random", size=16,
        dtype="uint8", layout="nhwc", device="cpu", workers=1,
    )
    if state.get("draws") is None:
        with pytest.warns(UserWarning, match="records no draw rules"):
            loader.load_state_dict(state)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            loader.load_state_dict(state)
    got = []
    for batch in loader:
        images, labels = batch
        got.append((list(batch.indices), labels.tolist(), np.asarray(images)))
    assert len(got) == len(saved["rest"])
    for (indices, labels, pixels), want in zip(got, saved["rest"]):
        assert indices == want["indices"]
        assert labels == want["labels"]
        # States of builds before 2026-12-03 record no draw rules: their crops were others.
        if state.get("draws") is not None:
            expected = np.frombuffer(bytes.fromhex(want["pixels"]), np.uint8)
            diff = np.abs(pixels.reshape(-1).astype(int) - expected.astype(int))
            assert diff.max() <= 8 and diff.mean() <= 1.0, (indices, diff.max(), diff.mean())
    # The epoch is done: what this loader saves now is the next one's start.
    after = loader.state_dict()
    assert (after["seed"], after["epoch"], after["position"]) == (7, 2, 0)
