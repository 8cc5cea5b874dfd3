"""pytest for the `edgevit` Python module (api/python/module.cpp), run from the repository root by ctest
(python_module_test, PYTHONPATH = the build's python/ folder) or after `pip install .`."""
import threading

import numpy as np
import pytest

import edgevit

CONFIG = "config/models/vit-digits.yaml"


@pytest.fixture(scope="module")
def engine():
    return edgevit.Engine(CONFIG, device="host-cpu", max_batch=10, threads=1)


def digit(d):
    return f"tests/data/digits/digit-{d}.png"


def test_plan(engine):
    p = engine.plan
    assert p["model"] == "vit-digits"
    assert p["device"] == "host-cpu"
    assert p["max_batch"] == 10
    assert p["input_shape"] == (10, 1, 8, 8)
    assert p["output_dims"] == {"logits": (10,), "embedding": (64,), "pre_logits": (64,)}
    assert p["arena_bytes"] > 0 and p["total_bytes"] >= p["arena_bytes"]
    assert len(p["plan_hash"]) == 16 and p["fits"]


def test_run_image_classifies_digits(engine):
    assert engine.labels[3] != ""
    for d in (3, 7):
        out = engine.run_image(digit(d))
        assert out["logits"].shape == (1, 10) and out["logits"].dtype == np.float32
        assert out["pre_logits"].shape == (1, 64)
        assert int(out["logits"].argmax()) == d


def test_infer_paths_agree(engine):
    # The engine's own buffer (no copy), a float32 C-contiguous array (read in place), a float64
    # Fortran-ordered one (converted into the input buffer): the same logits.
    for d in range(10):
        engine.load_image(digit(d), d)
    images = np.array(engine.input_buffer, copy=True)
    from_buffer = engine.infer(engine.input_buffer[:10])["logits"]
    from_array = engine.infer(images)["logits"]
    from_f64 = engine.infer(np.asfortranarray(images.astype(np.float64)))["logits"]
    assert np.array_equal(from_buffer, from_array)
    assert np.array_equal(from_buffer, from_f64)
    assert (from_buffer.argmax(axis=1) == np.arange(10)).sum() >= 9  # docs/digits.md: 98.9% test accuracy
    one = engine.infer(images[3:4])
    assert one["logits"].shape == (1, 10) and np.array_equal(one["logits"][0], from_buffer[3])


def test_outputs_are_copies(engine):
    first = engine.run_image(digit(3))["logits"].copy()
    kept = engine.run_image(digit(3))["logits"]
    engine.run_image(digit(7))
    assert np.array_equal(kept, first)


def test_errors(engine):
    with pytest.raises(edgevit.Error, match="no/such/model.yaml"):
        edgevit.Engine("no/such/model.yaml")
    with pytest.raises(edgevit.Error, match="no-such-board"):
        edgevit.Engine(CONFIG, device="no-such-board")
    with pytest.raises(edgevit.Error, match="shape"):
        engine.infer(np.zeros((1, 3, 8, 8), np.float32))
    with pytest.raises(edgevit.Error, match="1..10"):
        engine.infer(np.zeros((11, 1, 8, 8), np.float32))
    with pytest.raises(edgevit.Error, match="no/such.png"):
        engine.run_image("no/such.png")
    with pytest.raises(edgevit.Error, match="0..9"):
        engine.load_image(digit(3), 10)
    assert issubclass(edgevit.Error, RuntimeError)


def test_threads_share_one_engine(engine):
    # The GIL is released in infer; calls on one engine are serialized by the module, results stay right.
    expected = engine.run_image(digit(7))["logits"].copy()
    errors = []

    def work():
        for _ in range(20):
            if not np.array_equal(engine.run_image(digit(7))["logits"], expected):
                errors.append("differs")

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_named_outputs_and_tokens():
    # tokens only when asked for (and then every output the model has): a token-pooled model's pre_logits is
    # the class token's row of its final-normed tokens, and its embedding is pre_logits (docs/models.md).
    plain = edgevit.Engine(CONFIG, device="host-cpu", max_batch=2, threads=1).run_image(digit(3))
    assert sorted(plain) == ["embedding", "logits", "pre_logits"]
    e = edgevit.Engine(CONFIG, device="host-cpu", max_batch=2, threads=1, tokens=True)
    assert "tokens" in e.plan["output_dims"]
    out = e.run_image(digit(3))
    assert sorted(out) == ["embedding", "logits", "pre_logits", "tokens"]
    tokens = out["tokens"]
    assert tokens.ndim == 3 and tokens.shape[0] == 1 and tokens.shape[2] == 64
    assert tokens.shape[1:] == e.plan["output_dims"]["tokens"]
    assert np.array_equal(out["pre_logits"][0], tokens[0, 0])
    assert np.array_equal(out["embedding"], out["pre_logits"])
    assert int(out["logits"].argmax()) == 3


def test_non_square_input():
    # A model 48 high and 32 wide (issue #24): (N, C, H, W) everywhere, the transposed shape refused.
    e = edgevit.Engine("tests/data/families/resize/timm_vit_nohead.48x32.yaml", device="config/devices/host-cpu.yaml",
                       threads=1)
    assert e.plan["input_shape"] == (1, 3, 48, 32)
    assert e.input_buffer.shape == (1, 3, 48, 32)
    out = e.infer(np.linspace(-1, 1, 3 * 48 * 32, dtype=np.float32).reshape(1, 3, 48, 32))
    assert np.isfinite(out["pre_logits"]).all()
    with pytest.raises(edgevit.Error, match=r"\(N, 3, 48, 32\)"):
        e.infer(np.zeros((1, 3, 32, 48), np.float32))
