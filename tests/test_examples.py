"""Each example runs in-process at reduced size and does its job: the classifier learns, the
losses go down, the solver converges, the simulation matches NumPy."""
import importlib
import os
import sys

import numpy as np
import pytest

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


@pytest.fixture(scope="module")
def examples():
  sys.path.insert(0, EXAMPLES)
  try:
    yield lambda name: importlib.import_module(name)
  finally:
    sys.path.remove(EXAMPLES)


def test_mlp_classifier(examples, capsys):
  result = examples("mlp_classifier").main(["--small", "--epochs", "3"])
  out = capsys.readouterr().out
  assert "\r" in out and "test accuracy" in out
  assert result["losses"][-1] < result["losses"][0]
  assert result["test_accuracy"] > 0.85, result


def test_mlp_classifier_synthetic_fallback(examples, capsys):
  result = examples("mlp_classifier").main(["--small", "--epochs", "2", "--synthetic",
                                            "--quiet"])
  assert result["data"] == "synthetic digits"
  assert result["test_accuracy"] > 0.6, result


def test_mlp_classifier_without_scikit_learn(examples, capsys, monkeypatch):
  monkeypatch.setitem(sys.modules, "sklearn", None)  # import sklearn raises ImportError
  monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
  x_train, y_train, x_test, y_test, name = examples("mlp_classifier").load_data()
  assert name == "synthetic digits" and "scikit-learn is not installed" in capsys.readouterr().out
  assert x_train.shape[1] == 64 and set(np.unique(y_train)) == set(range(10))
  np.testing.assert_allclose(x_train.mean(0), 0, atol=1e-4)


def test_dp_sgd(examples):
  result = examples("dp_sgd").main(["--small"])
  assert result["losses"][-1] < 0.5 * result["initial_loss"]
  assert result["dp_accuracy"] > 0.7 and result["sgd_accuracy"] > 0.85, result


def test_sequence_model(examples):
  result = examples("sequence_model").main(["--small"])
  losses = result["losses"]
  assert np.mean(losses[-10:]) < 0.25 * np.mean(losses[:5])
  assert result["test_mse"] < 0.3, result


def test_newton_solver(examples):
  result = examples("newton_solver").main(["--small"])
  assert result["iterations"] <= 6 and result["residual"] < 1e-12
  h = result["history"]
  assert all(b < a for a, b in zip(h, h[1:]))  # the residual falls every step
  assert result["error"] < 2 * result["h"] ** 2  # O(h^2) discretisation error


def test_heat_equation(examples):
  result = examples("heat_equation").main(["--small"])
  assert result["max_error"] < 1e-5
  assert 0.5 < result["heat_fraction"] < 1.0


def test_data_parallel_step_matches_one_device(examples, monkeypatch):
  """Two CPU devices take the step of the whole batch: the pmean of their losses is the loss of
  the concatenated batch, and every device's parameters stay equal."""
  monkeypatch.setenv("OURJAX_NUM_CPU_DEVICES", "2")
  import ourjax
  import data_parallel as dp
  cfg = dict(seq=8, dim=16, heads=2, layers=1, vocab=12)
  plain = dp.make_step(ourjax, cfg)
  step = ourjax.pmap(plain, axis_name="devices", devices=ourjax.devices("cpu")[:2])
  params, opt = dp.init(0, cfg)
  x, labels = dp.batch(1, 2, 3, cfg)
  new, _, loss = step(dp.replicate(params, 2), dp.replicate(opt, 2), x, labels)
  whole = ourjax.jit(plain.loss, backend="cpu")(params, x.reshape((6,) + x.shape[2:]),
                                                labels.reshape(6, -1))
  np.testing.assert_allclose(np.asarray(loss), [float(whole)] * 2, rtol=1e-5)
  w = np.asarray(new["w_out"])
  np.testing.assert_array_equal(w[0], w[1])
  assert not np.allclose(w[0], params["w_out"])
