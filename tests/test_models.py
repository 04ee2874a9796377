"""benchmarks/models.py at its small sizes: every workload compiles natively and its jitted result
matches a reference (the same function op by op under ``disable_jit``; float64 NumPy where it is
cheap to write), the training steps' gradients are finite and a few steps lower the loss, and
the command line reports failures through its exit status.  Correctness only: nothing is timed."""
import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))

import models  # noqa: E402
import run  # noqa: E402  (its NumPy MLP step is the reference)

import ourjax  # noqa: E402

NAMES = [w["name"] for w in models.workloads("cpu", small=True)]


@pytest.fixture(autouse=True)
def strict_lowering(monkeypatch):
  """The benchmark measures compiled code: a primitive without a lowering is an error here."""
  monkeypatch.setenv("OURJAX_STRICT_LOWERING", "1")


def _workload(name):
  (w,) = [w for w in models.workloads("cpu", small=True) if w["name"] == name]
  return w


@pytest.mark.parametrize("name", NAMES)
def test_workload_matches_eager(name):
  libs = models.Libs("cpu", with_jax=False)
  row = models.run_workload(_workload(name), libs, timing=False)
  assert row["error"] is None, row.get("traceback")
  assert row["check_against"] == "eager"
  assert row["check"] == "ok", row["check_detail"]
  assert row["ourjax_ms"] is None and row["ourjax_compile_s"] > 0


def _jit(w):
  return ourjax.jit(w["make"](ourjax), backend="cpu")


def test_attention_against_float64_numpy():
  w = _workload("attention")
  q, k, v = (a.astype(np.float64) for a in w["inputs"])
  s = np.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(q.shape[-1])
  p = np.exp(s - s.max(-1, keepdims=True))
  want = np.einsum("bhqk,bhkd->bhqd", p / p.sum(-1, keepdims=True), v)
  np.testing.assert_allclose(np.asarray(_jit(w)(*w["inputs"])), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith("conv_bn_relu")])
def test_conv_bn_relu_against_float64_numpy(name):
  w = _workload(name)
  x, k, scale, shift = (a.astype(np.float64) for a in w["inputs"])
  n, h, wd, _ = x.shape
  xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
  conv = sum(np.einsum("nhwc,co->nhwo", xp[:, dy:dy + h, dx:dx + wd], k[dy, dx])
             for dy in range(3) for dx in range(3))
  want = np.maximum(conv * scale + shift, 0.0)
  np.testing.assert_allclose(np.asarray(_jit(w)(*w["inputs"])), want, rtol=1e-4, atol=1e-4)


def test_ode_rk4_against_float64_numpy():
  w = _workload("ode_rk4")
  s, kc = (a.astype(np.float64) for a in w["inputs"])
  dt = 0.01

  def field(s):
    x, v = s
    lap = np.roll(x, 1) + np.roll(x, -1) - 2 * x
    return np.stack([v, -x - 0.5 * x ** 3 + kc * lap - 0.1 * v])
  energy = []
  for _ in range(w["cfg"]["steps"]):
    k1 = field(s)
    k2 = field(s + 0.5 * dt * k1)
    k3 = field(s + 0.5 * dt * k2)
    k4 = field(s + dt * k3)
    s = s + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    energy.append(np.mean(s[0] ** 2))
  final, ys = _jit(w)(*w["inputs"])
  np.testing.assert_allclose(np.asarray(final), s, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(np.asarray(ys), energy, rtol=1e-4, atol=1e-6)


def test_mlp_step_against_float64_numpy():
  w = _workload("mlp")
  params, x, labels = w["inputs"]
  params64 = [(wt.astype(np.float64), b.astype(np.float64)) for wt, b in params]
  onehot = np.eye(params[-1][0].shape[1])[labels]
  want, loss = run.mlp_step_numpy(params64, x.astype(np.float64), onehot, lr=0.1)
  new, value = _jit(w)(*w["inputs"])
  np.testing.assert_allclose(float(value), loss, rtol=1e-5)
  for (nw, nb), (ww, wb), (ow, ob) in zip(new, want, params):
    # the updates themselves, not only the new parameters (which the old ones dominate)
    np.testing.assert_allclose(np.asarray(nw) - ow, ww - ow, rtol=1e-3, atol=1e-6)
    np.testing.assert_allclose(np.asarray(nb) - ob, wb - ob, rtol=1e-3, atol=1e-6)


def test_per_example_grads_average_to_the_batch_gradient():
  w = _workload("per_example_grads")
  params, x, labels = w["inputs"]
  per_example = _jit(w)(*w["inputs"])
  classes = w["cfg"]["sizes"][-1]
  batch = ourjax.jit(ourjax.grad(
      lambda p: models._mlp_loss(ourjax, p, x, labels, classes)))(params)
  for pe, b in zip(ourjax.tree_util.tree_leaves(per_example), ourjax.tree_util.tree_leaves(batch)):
    assert pe.shape == (x.shape[0],) + b.shape
    np.testing.assert_allclose(np.asarray(pe).mean(0), np.asarray(b), rtol=1e-4, atol=1e-6)


def _train(name, steps=4):
  """Losses of ``steps`` jitted training steps fed back into each other."""
  w = _workload(name)
  step = _jit(w)
  args, losses = list(w["inputs"]), []
  if name == "transformer":      # Adam from its usual start: zero moments, step 0
    zeros = ourjax.tree_util.tree_map(np.zeros_like, args[0])
    args[1] = (zeros, zeros, np.float32(0.0))
  for _ in range(steps):
    if name == "lstm":           # value_and_grad only: take the SGD step here
      loss, grads = step(*args)
      assert all(np.isfinite(np.asarray(g)).all() for g in ourjax.tree_util.tree_leaves(grads))
      args[0] = ourjax.tree_util.tree_map(lambda p, g: p - 0.5 * g, args[0], grads)
    else:
      out = step(*args)
      args[0], loss = out[0], out[-1]
      if name == "transformer":
        args[1] = out[1]
    assert all(np.isfinite(np.asarray(p)).all() for p in ourjax.tree_util.tree_leaves(args[0]))
    losses.append(float(loss))
  return losses


@pytest.mark.parametrize("name", ["transformer", "cnn", "mlp", "lstm"])
def test_training_steps_lower_the_loss(name):
  losses = _train(name)
  assert np.isfinite(losses).all() and losses[-1] < losses[0], losses


def test_compare_reports_a_wrong_update():
  params = [np.ones((3, 2), np.float32), np.ones(2, np.float32)]
  ref = ([params[0] - 0.01, params[1] - 0.02], np.float32(1.0))
  ok, worst, _ = models.compare(ref, ref, 1e-3, args=[params], train=True, lib_ours=ourjax,
                                lib_ref=ourjax)
  assert ok and worst == 0.0
  # the new parameters are within 1e-3 of the reference, but the update is 10% off
  bad = ([ref[0][0] - 0.001, ref[0][1]], ref[1])
  ok, worst, where = models.compare(bad, ref, 1e-3, args=[params], train=True, lib_ours=ourjax,
                                    lib_ref=ourjax)
  assert not ok and "update of parameter leaf 0" in where


def test_normwise_compare_passes_isolated_flips_and_fails_a_wrong_block():
  """What the GPU check is for: a relu that tf32 flips changes one element by its whole size;
  a wrong tile changes many."""
  rng = np.random.default_rng(0)
  ref = rng.standard_normal((256, 256)).astype(np.float32)
  flips = ref.copy()
  flips[3, 7] = 0.0
  flips[100, 9] = 0.0
  kw = dict(lib_ours=ourjax, lib_ref=ourjax)
  assert not models.compare(flips, ref, 2e-2, **kw)[0]
  assert models.compare(flips, ref, 2e-2, metric="norm", **kw)[0]
  tile = ref.copy()
  tile[:32, :32] *= 1.5
  ok, _, where = models.compare(tile, ref, 2e-2, metric="norm", **kw)
  assert not ok and "norm of err" in where


def test_tolerances_per_target_and_precision():
  assert models.tolerance("cpu", None, "conv") == (2e-3, "max")
  assert models.tolerance("cuda", None, "default") == (5e-2, "norm")     # tf32 in both
  assert models.tolerance("cuda", "highest", "default") == (2e-2, "max")


@pytest.fixture
def cli_env(monkeypatch):
  """``main`` sets these before importing the libraries: put them back afterwards."""
  for var in ("OURJAX_CACHE_DIR", "OURJAX_PLATFORMS", "JAX_PLATFORMS",
              "XLA_PYTHON_CLIENT_PREALLOCATE"):
    monkeypatch.setenv(var, os.environ.get(var, ""))


def test_command_line_writes_json(cli_env, tmp_path, capsys):
  path = tmp_path / "rows.json"
  rc = models.main(["--small", "--no-jax", "--only", "attention,conv_bn_relu", "--repeat", "1",
                    "--min-time", "0", "--json", str(path)])
  out = capsys.readouterr().out
  assert rc == 0, out
  assert out.startswith("machine: ") and "geomean" in out
  data = json.loads(path.read_text())
  assert [r["name"] for r in data["rows"]] == ["conv_bn_relu_8x8x8", "conv_bn_relu_4x4x16",
                                              "attention"]
  assert all(r["check"] == "ok" and r["ourjax_ms"] > 0 for r in data["rows"])


def test_command_line_fails_when_a_workload_raises(cli_env, monkeypatch, capsys):
  def make(lib, cfg):
    return lambda x: lib.numpy.reshape(x, (2, 2))     # 3 elements: a shape error
  monkeypatch.setitem(models.FAMILIES, "broken",
                      (make, lambda rng, cfg: [np.ones(3, np.float32)], "default", False))
  monkeypatch.setitem(models.SIZES["small"], "broken", {})
  rc = models.main(["--small", "--no-jax", "--only", "broken", "--repeat", "1",
                    "--min-time", "0"])
  out = capsys.readouterr().out
  assert rc == 1
  assert "broken" in out and "ERROR" in out


@pytest.mark.gpu
def test_workloads_on_the_gpu():
  from ourjax.backends.cuda import driver
  if not driver.available():
    pytest.skip(f"no CUDA GPU: {driver.unavailable_reason()}")
  rows = models.run_suite(target="cuda", small=True, with_jax=False, timing=False)
  assert all(r["check"] == "ok" for r in rows), [(r["name"], r["error"] or r["check_detail"])
                                                   for r in rows if r["check"] != "ok"]
