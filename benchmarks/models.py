"""Whole-model benchmarks: ourjax against JAX (XLA) on training and inference steps.

    python benchmarks/models.py [--target cpu|cuda] [--small] [--only NAME[,NAME]] [--repeat N]
                                [--min-time S] [--json PATH] [--no-jax] [--cache] [--profile]
                                [--matmul-precision highest]

Every workload is a plain JAX program written against a ``lib`` module (``ourjax`` or ``jax``:
``lib.numpy``, ``lib.lax``, ``lib.nn``, ``lib.value_and_grad``, ``lib.vmap``), so both libraries
run the same code on the same NumPy inputs.  For each one the script

* checks ourjax's jitted result against JAX's (or, without JAX, against the same function run
  op by op under ``ourjax.disable_jit()``), leaf by leaf, and for training steps also the
  parameter updates (new minus old), so that small gradients are not hidden by the parameters
  (elementwise on the CPU, normwise on the GPU where both libraries use tf32: see ``RTOL``);
* measures the compile time: the wall time of the first call (tracing, compiling, running once),
  with ourjax's disk cache off unless ``--cache`` (JAX's persistent cache is off by default);
* times the two libraries alternately in one process, ``--repeat`` rounds at least and
  ``--min-time`` seconds at least, each call ended by ``block_until_ready``, and prints medians.

The table's ratio is ourjax/JAX: below 1.0 means ourjax is faster.  The exit status is 1 when a
check failed or a workload raised.  Sizes live in ``SIZES``, one table per target.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import _block  # noqa: E402  (waits for a tree of results, as benchmarks/run.py does)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import data_parallel  # noqa: E402  (the transformer: pre-LN blocks, causal MHA, GELU MLP, Adam)

# ------------------------------------------------------------------------------------------------
# Sizes: one table per target.  cpu: a step of about 1-50 ms for JAX on 2 cores; cuda: about
# 1-50 ms on one H100 (batch 32-64, ResNet-like sizes); small: tiny, for the test suite.

SIZES = {
    "cpu": {
        "transformer": dict(batch=8, seq=64, dim=128, heads=4, layers=2, vocab=256),
        "cnn": dict(batch=16, hw=32, chans=(16, 32, 64), classes=10),
        "conv_bn_relu": dict(cases=[(2, 56, 56, 128), (2, 28, 28, 256)]),
        "resnet_infer": dict(batch=2, hw=56, width=32, classes=100),
        "lstm": dict(steps=50, batch=32, inputs=64, hidden=128, outputs=16),
        "ode_rk4": dict(steps=1000, n=4096),
        "attention": dict(batch=4, heads=8, seq=256, head_dim=64),
        "mlp": dict(batch=128, sizes=(784, 512, 512, 10)),
        "per_example_grads": dict(batch=128, sizes=(64, 128, 10)),
    },
    "cuda": {
        "transformer": dict(batch=32, seq=256, dim=512, heads=8, layers=4, vocab=1024),
        "cnn": dict(batch=64, hw=64, chans=(64, 128, 256), classes=10),
        "conv_bn_relu": dict(cases=[(64, 56, 56, 128), (64, 28, 28, 256)]),
        "resnet_infer": dict(batch=64, hw=56, width=64, classes=1000),
        "lstm": dict(steps=100, batch=64, inputs=256, hidden=512, outputs=64),
        "ode_rk4": dict(steps=1000, n=1 << 16),
        "attention": dict(batch=32, heads=16, seq=1024, head_dim=64),
        "mlp": dict(batch=1024, sizes=(784, 512, 512, 10)),
        "per_example_grads": dict(batch=512, sizes=(256, 512, 10)),
    },
    "small": {
        "transformer": dict(batch=2, seq=8, dim=16, heads=2, layers=1, vocab=12),
        "cnn": dict(batch=4, hw=8, chans=(4, 8, 8), classes=5),
        "conv_bn_relu": dict(cases=[(2, 8, 8, 8), (2, 4, 4, 16)]),
        "resnet_infer": dict(batch=2, hw=8, width=4, classes=5),
        "lstm": dict(steps=5, batch=3, inputs=4, hidden=8, outputs=2),
        "ode_rk4": dict(steps=50, n=16),
        "attention": dict(batch=2, heads=2, seq=8, head_dim=4),
        "mlp": dict(batch=8, sizes=(20, 16, 16, 10)),
        "per_example_grads": dict(batch=6, sizes=(5, 7, 3)),
    },
}

# Check tolerances.  On the CPU a leaf passes when max|ours - ref| <= atol + rtol * max|ref|.
# Convolutions and long contractions sum in a different order in each library.
#
# On the GPU both libraries run f32 dots on tf32 tensor cores by default (10-bit significands),
# each rounding its own way: a pre-activation near zero then lands on the other side of a relu
# in each library, and that element of a gradient differs by its whole size.  Elementwise checks
# fail on correct code, so the default GPU check is normwise,
# ||ours - ref|| <= atol * sqrt(size) + rtol * ||ref||.  Measured on an H100 (batch 512-1024),
# such flips give normwise differences of 1.5-2% in the MLP and CNN gradients, hence 5%.  With
# ``--matmul-precision highest`` (no tf32) the elementwise check holds on the GPU as well, and it
# is the strict one.
RTOL = {
    "cpu": {"default": 1e-3, "conv": 2e-3, "ode_rk4": 2e-3},
    "cuda": {"default": 5e-2, "conv": 5e-2, "ode_rk4": 2e-2},
    "cuda-highest": {"default": 2e-2, "conv": 2e-2, "ode_rk4": 2e-2},
}
METRIC = {"cpu": "max", "cuda": "norm", "cuda-highest": "max"}


def tolerance(target: str, precision, tol_class: str):
  """(rtol, metric) of a check on ``target`` at matmul ``precision`` (None: the default)."""
  key = "cpu" if target != "cuda" else (
      "cuda-highest" if str(precision).lower() in ("highest", "float32") else "cuda")
  return RTOL[key][tol_class], METRIC[key]


ATOL = 1e-6


# ------------------------------------------------------------------------------------------------
# Workloads.  ``make(lib, cfg)`` returns the function to jit; ``inputs(rng, cfg)`` its NumPy
# arguments.  ``train`` marks a step whose first output is the updated first argument.


def _layernorm(lib, x, g, b):
  jnp = lib.numpy
  mu = jnp.mean(x, axis=-1, keepdims=True)
  var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
  return (x - mu) * lib.lax.rsqrt(var + 1e-5) * g + b


def _conv(lib, x, w, stride=1):
  return lib.lax.conv_general_dilated(x, w, (stride, stride), "SAME",
                                      dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _xent(lib, logits, labels, classes):
  jnp, nn = lib.numpy, lib.nn
  logp = nn.log_softmax(logits, axis=-1)
  return -jnp.mean(jnp.sum(logp * nn.one_hot(labels, classes), axis=-1))


def _sgd(lib, params, grads, lr):
  return lib.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)


def _normal(rng, shape, scale=1.0):
  return (rng.standard_normal(shape) * scale).astype(np.float32)


# -- 1. transformer: pre-LN blocks, causal multi-head attention, GELU MLP, Adam -----------------

def transformer_make(lib, cfg):
  # the model of examples/data_parallel.py, on one device
  return data_parallel.make_step(lib, cfg, axis=None)


def transformer_inputs(rng, cfg):
  B, T, D, V = cfg["batch"], cfg["seq"], cfg["dim"], cfg["vocab"]
  s = 1.0 / np.sqrt(D)

  def block():
    return {"ln1_g": np.ones(D, np.float32), "ln1_b": np.zeros(D, np.float32),
            "w_qkv": _normal(rng, (D, 3 * D), s), "w_o": _normal(rng, (D, D), s),
            "ln2_g": np.ones(D, np.float32), "ln2_b": np.zeros(D, np.float32),
            "w_up": _normal(rng, (D, 4 * D), s), "b_up": np.zeros(4 * D, np.float32),
            "w_down": _normal(rng, (4 * D, D), s / 2), "b_down": np.zeros(D, np.float32)}
  params = {"blocks": [block() for _ in range(cfg["layers"])],
            "lnf_g": np.ones(D, np.float32), "lnf_b": np.zeros(D, np.float32),
            "w_out": _normal(rng, (D, V), s)}
  # Adam's moments in the middle of training (not zero), so the update is well conditioned and
  # comparable between libraries.
  leaves = lambda f: _tree_map_np(f, params)     # noqa: E731
  m = leaves(lambda p: _normal(rng, p.shape, 1e-3))
  v = leaves(lambda p: rng.uniform(1e-6, 1e-5, p.shape).astype(np.float32))
  opt = (m, v, np.float32(10.0))
  x = _normal(rng, (B, T, D))
  labels = rng.randint(0, V, (B, T)).astype(np.int32)
  return [params, opt, x, labels]


def _tree_map_np(f, tree):
  # (not tree_util.tree_map: the draws of transformer_inputs follow the dicts' own key order)
  if isinstance(tree, dict):
    return {k: _tree_map_np(f, v) for k, v in tree.items()}
  if isinstance(tree, (list, tuple)):
    return type(tree)(_tree_map_np(f, v) for v in tree)
  return f(tree)


# -- 2. cnn: conv + batchnorm (batch statistics) + relu, max-pools, dense, SGD -------------------

def cnn_make(lib, cfg):
  jnp, lax, nn = lib.numpy, lib.lax, lib.nn
  classes = cfg["classes"]

  def batchnorm(x, g, b):
    mean = jnp.mean(x, axis=(0, 1, 2))
    var = jnp.mean(jnp.square(x - mean), axis=(0, 1, 2))
    return (x - mean) * lax.rsqrt(var + 1e-5) * g + b

  def maxpool(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

  def loss(params, x, labels):
    for i, p in enumerate(params["convs"]):
      x = nn.relu(batchnorm(_conv(lib, x, p["w"]), p["g"], p["b"]))
      if i < 2:
        x = maxpool(x)
    x = jnp.mean(x, axis=(1, 2))
    return _xent(lib, x @ params["w_out"] + params["b_out"], labels, classes)

  def step(params, x, labels):
    value, grads = lib.value_and_grad(loss)(params, x, labels)
    return _sgd(lib, params, grads, 0.05), value
  return step


def cnn_inputs(rng, cfg):
  B, S, chans = cfg["batch"], cfg["hw"], cfg["chans"]
  convs, cin = [], 3
  for c in chans:
    convs.append({"w": _normal(rng, (3, 3, cin, c), np.sqrt(2.0 / (9 * cin))),
                  "g": np.ones(c, np.float32), "b": np.zeros(c, np.float32)})
    cin = c
  params = {"convs": convs, "w_out": _normal(rng, (cin, cfg["classes"]), 1 / np.sqrt(cin)),
            "b_out": np.zeros(cfg["classes"], np.float32)}
  x = _normal(rng, (B, S, S, 3))
  labels = rng.randint(0, cfg["classes"], B).astype(np.int32)
  return [params, x, labels]


# -- 3. conv_bn_relu: conv 3x3 + folded batchnorm + relu (inference) ----------------------------

def conv_bn_relu_make(lib, cfg):
  def f(x, w, scale, shift):
    return lib.nn.relu(_conv(lib, x, w) * scale + shift)
  return f


def conv_bn_relu_inputs(rng, case):
  n, h, w, c = case
  return [_normal(rng, (n, h, w, c)), _normal(rng, (3, 3, c, c), np.sqrt(2.0 / (9 * c))),
          rng.uniform(0.5, 1.5, c).astype(np.float32), _normal(rng, (c,), 0.1)]


# -- 4. resnet_infer: stem, basic residual blocks with stride-2 downsampling, pool, dense --------

RESNET_BLOCKS = ((1, 1), (1, 1), (2, 2), (2, 1), (4, 2))   # (width multiple, stride)


def resnet_make(lib, cfg):
  jnp, nn = lib.numpy, lib.nn

  def bn(x, p, name):
    return x * p[name + "_s"] + p[name + "_b"]

  def block(x, p, stride):
    h = nn.relu(bn(_conv(lib, x, p["w1"], stride), p, "bn1"))
    h = bn(_conv(lib, h, p["w2"]), p, "bn2")
    short = bn(_conv(lib, x, p["wp"], stride), p, "bnp") if "wp" in p else x
    return nn.relu(h + short)

  def apply(params, x):
    x = nn.relu(bn(_conv(lib, x, params["stem"]), params, "stem"))
    for p, (_, stride) in zip(params["blocks"], RESNET_BLOCKS):
      x = block(x, p, stride)
    return jnp.mean(x, axis=(1, 2)) @ params["w_out"] + params["b_out"]
  return apply


def resnet_inputs(rng, cfg):
  C = cfg["width"]

  def bn(c, name, out):
    out[name + "_s"] = rng.uniform(0.5, 1.0, c).astype(np.float32)
    out[name + "_b"] = _normal(rng, (c,), 0.1)
    return out

  def conv_w(k, cin, cout):
    return _normal(rng, (k, k, cin, cout), np.sqrt(2.0 / (k * k * cin)))
  params = bn(C, "stem", {"stem": conv_w(3, 3, C)})
  blocks, cin = [], C
  for mult, stride in RESNET_BLOCKS:
    c = mult * C
    p = {"w1": conv_w(3, cin, c), "w2": conv_w(3, c, c)}
    bn(c, "bn1", p)
    bn(c, "bn2", p)
    if stride != 1 or cin != c:
      p["wp"] = conv_w(1, cin, c)
      bn(c, "bnp", p)
    blocks.append(p)
    cin = c
  params["blocks"] = blocks
  params["w_out"] = _normal(rng, (cin, cfg["classes"]), 1 / np.sqrt(cin))
  params["b_out"] = np.zeros(cfg["classes"], np.float32)
  return [params, _normal(rng, (cfg["batch"], cfg["hw"], cfg["hw"], 3))]


# -- 5. lstm: an LSTM in lax.scan, squared-error loss, value_and_grad ---------------------------

def lstm_make(lib, cfg):
  jnp, nn = lib.numpy, lib.nn

  def loss(params, xs, ys):
    hidden = params["wh"].shape[0]

    def cell(carry, x):
      h, c = carry
      z = x @ params["wx"] + h @ params["wh"] + params["b"]
      i, f, g, o = jnp.split(z, 4, axis=-1)
      c = nn.sigmoid(f) * c + nn.sigmoid(i) * jnp.tanh(g)
      h = nn.sigmoid(o) * jnp.tanh(c)
      return (h, c), h
    zeros = jnp.zeros((xs.shape[1], hidden), xs.dtype)
    _, hs = lib.lax.scan(cell, (zeros, zeros), xs)
    return jnp.mean(jnp.square(hs @ params["w_out"] - ys))
  return lib.value_and_grad(loss)


def lstm_inputs(rng, cfg):
  T, B, I, H, O = cfg["steps"], cfg["batch"], cfg["inputs"], cfg["hidden"], cfg["outputs"]
  params = {"wx": _normal(rng, (I, 4 * H), 1 / np.sqrt(I)),
            "wh": _normal(rng, (H, 4 * H), 1 / np.sqrt(H)),
            "b": np.zeros(4 * H, np.float32), "w_out": _normal(rng, (H, O), 1 / np.sqrt(H))}
  return [params, _normal(rng, (T, B, I)), _normal(rng, (T, B, O))]


# -- 6. ode_rk4: RK4 in lax.scan on a chain of coupled, damped Duffing oscillators ---------------

def ode_make(lib, cfg):
  jnp = lib.numpy
  steps, dt = cfg["steps"], cfg.get("dt", 0.01)

  def field(s, k):
    x, v = s[0], s[1]
    coupling = k * (jnp.roll(x, 1) + jnp.roll(x, -1) - 2.0 * x)
    return jnp.stack([v, -x - 0.5 * x * x * x + coupling - 0.1 * v])

  def integrate(s0, k):
    def rk4(s, _):
      k1 = field(s, k)
      k2 = field(s + 0.5 * dt * k1, k)
      k3 = field(s + 0.5 * dt * k2, k)
      k4 = field(s + dt * k3, k)
      s = s + (dt / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
      return s, jnp.mean(s[0] * s[0])
    return lib.lax.scan(rk4, s0, None, length=steps)
  return integrate


def ode_inputs(rng, cfg):
  return [_normal(rng, (2, cfg["n"]), 0.5), rng.uniform(0.1, 0.5, cfg["n"]).astype(np.float32)]


# -- 7. attention: softmax(q k^T / sqrt(d)) v, forward ------------------------------------------

def attention_make(lib, cfg):
  jnp = lib.numpy

  def attend(q, k, v):
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.float32(np.sqrt(q.shape[-1]))
    return jnp.einsum("bhqk,bhkd->bhqd", lib.nn.softmax(s, axis=-1), v)
  return attend


def attention_inputs(rng, cfg):
  shape = (cfg["batch"], cfg["heads"], cfg["seq"], cfg["head_dim"])
  return [_normal(rng, shape), _normal(rng, shape), _normal(rng, shape)]


# -- 8. mlp: 784-512-512-10 relu MLP, softmax cross-entropy, SGD --------------------------------

def _mlp_loss(lib, params, x, labels, classes):
  h = x
  for i, (w, b) in enumerate(params):
    h = h @ w + b
    if i < len(params) - 1:
      h = lib.nn.relu(h)
  return _xent(lib, h, labels, classes)


def mlp_make(lib, cfg):
  classes = cfg["sizes"][-1]

  def step(params, x, labels):
    value, grads = lib.value_and_grad(lambda p: _mlp_loss(lib, p, x, labels, classes))(params)
    return _sgd(lib, params, grads, 0.1), value
  return step


def _mlp_params(rng, sizes):
  return [(_normal(rng, (m, n), np.sqrt(2.0 / m)), np.zeros(n, np.float32))
          for m, n in zip(sizes[:-1], sizes[1:])]


def mlp_inputs(rng, cfg):
  sizes = cfg["sizes"]
  return [_mlp_params(rng, sizes), _normal(rng, (cfg["batch"], sizes[0])),
          rng.randint(0, sizes[-1], cfg["batch"]).astype(np.int32)]


# -- 9. per_example_grads: vmap(grad(loss), in_axes=(None, 0, 0)) of a small MLP ----------------

def per_example_make(lib, cfg):
  jnp, nn = lib.numpy, lib.nn
  classes = cfg["sizes"][-1]

  def loss(params, x, label):        # one example: x of shape (features,), label a scalar
    logits = _mlp_forward(lib, params, x)
    return -jnp.sum(nn.log_softmax(logits) * nn.one_hot(label, classes))
  return lib.vmap(lib.grad(loss), in_axes=(None, 0, 0))


def _mlp_forward(lib, params, x):
  for i, (w, b) in enumerate(params):
    x = x @ w + b
    if i < len(params) - 1:
      x = lib.nn.relu(x)
  return x


def per_example_inputs(rng, cfg):
  sizes = cfg["sizes"]
  return [_mlp_params(rng, sizes), _normal(rng, (cfg["batch"], sizes[0])),
          rng.randint(0, sizes[-1], cfg["batch"]).astype(np.int32)]


# (name, make, inputs, tolerance class, train step?) per workload family
FAMILIES = {
    "transformer": (transformer_make, transformer_inputs, "default", True),
    "cnn": (cnn_make, cnn_inputs, "conv", True),
    "conv_bn_relu": (conv_bn_relu_make, conv_bn_relu_inputs, "conv", False),
    "resnet_infer": (resnet_make, resnet_inputs, "conv", False),
    "lstm": (lstm_make, lstm_inputs, "default", False),
    "ode_rk4": (ode_make, ode_inputs, "ode_rk4", False),
    "attention": (attention_make, attention_inputs, "default", False),
    "mlp": (mlp_make, mlp_inputs, "default", True),
    "per_example_grads": (per_example_make, per_example_inputs, "default", False),
}


def workloads(target: str = "cpu", small: bool = False, only=None):
  """The workloads as dicts: name, family, make(lib) -> function, inputs (NumPy, identical for
  both libraries), tol (tolerance class), train (first output updates the first argument)."""
  sizes = SIZES["small" if small else target]
  out = []
  for family, (make, inputs, tol, train) in FAMILIES.items():
    cfg = sizes[family]
    if family == "conv_bn_relu":     # one workload per (batch, height, width, channels)
      cases = [(f"conv_bn_relu_{h}x{wd}x{c}", (n, h, wd, c)) for n, h, wd, c in cfg["cases"]]
    else:
      cases = [(family, cfg)]
    for name, c in cases:
      if only and family not in only and name not in only:
        continue
      rng = np.random.RandomState(_seed(name))
      out.append(dict(name=name, family=family, cfg=c, tol=tol, train=train,
                      make=(lambda lib, make=make, c=c: make(lib, c)),
                      inputs=inputs(rng, c)))
  return out


def _seed(name: str) -> int:
  return sum(ord(ch) * (i + 1) for i, ch in enumerate(name)) % (1 << 31)


# ------------------------------------------------------------------------------------------------
# Running, checking, timing


def _host_leaves(lib, tree):
  return [np.asarray(x) for x in lib.tree_util.tree_leaves(tree)]


def compare(ours, ref, tol_rtol, atol=ATOL, args=None, train=False, lib_ours=None,
            lib_ref=None, metric="max"):
  """(passed, worst, message): the leaves of ``ours`` against those of ``ref``; for a training
  step also the updates (first output minus first argument), which the parameters would
  otherwise hide.  ``metric`` "max" compares max|ours - ref| with atol + rtol * max|ref|, "norm"
  the 2-norms (atol scaled by sqrt(size)).  ``worst`` is the largest error over its tolerance
  (<= 1 passes)."""
  a = _host_leaves(lib_ours, ours)
  b = _host_leaves(lib_ref, ref)
  if len(a) != len(b):
    return False, math.inf, f"{len(a)} output leaves, reference has {len(b)}"
  pairs = [(f"output leaf {i}", x, y) for i, (x, y) in enumerate(zip(a, b))]
  if train:
    old = [np.asarray(x, np.float64) for x in lib_ours.tree_util.tree_leaves(args[0])]
    new_a = _host_leaves(lib_ours, ours[0])
    new_b = _host_leaves(lib_ref, ref[0])
    pairs += [(f"update of parameter leaf {i}", x.astype(np.float64) - o,
               y.astype(np.float64) - o) for i, (x, y, o) in enumerate(zip(new_a, new_b, old))]
  worst, where = 0.0, ""
  for what, x, y in pairs:
    if x.shape != y.shape:
      return False, math.inf, f"{what}: shape {x.shape}, reference {y.shape}"
    if not y.size:
      continue
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    if not np.isfinite(x64).all():
      if not np.array_equal(np.isfinite(x64), np.isfinite(y64)):
        return False, math.inf, f"{what}: non-finite values where the reference has none"
      x64, y64 = np.where(np.isfinite(x64), x64, 0), np.where(np.isfinite(y64), y64, 0)
    if metric == "norm":
      err, scale = np.linalg.norm((x64 - y64).ravel()), np.linalg.norm(y64.ravel())
      r = err / (atol * np.sqrt(y64.size) + tol_rtol * scale)
      desc = f"norm of err {err:.2e}, norm of ref {scale:.2e}"
    else:
      err, scale = np.max(np.abs(x64 - y64)), np.max(np.abs(y64))
      r = err / (atol + tol_rtol * scale)
      desc = f"max abs err {err:.2e}, max |ref| {scale:.2e}"
    if r > worst:
      worst, where = r, f"{what} {x.shape}: {desc}"
  return worst <= 1.0, worst, where


class Libs:
  """ourjax (and JAX when importable) set up for one target."""

  def __init__(self, target: str, with_jax: bool, precision=None):
    import ourjax
    self.target, self.ourjax, self.jax, self.precision = target, ourjax, None, precision
    if precision:
      ourjax.config.update("jax_default_matmul_precision", precision)
    if with_jax:
      try:
        import jax
        try:
          jax.config.update("jax_platforms", "cuda" if target == "cuda" else "cpu")
        except Exception:   # noqa: BLE001  (already initialised: keep its platform)
          pass
        if target == "cuda" and not any(d.platform == "gpu" for d in jax.devices()):
          print("JAX has no GPU here: timing ourjax only", file=sys.stderr)
        else:
          self.jax = jax
          if precision:
            jax.config.update("jax_default_matmul_precision", precision)
      except ImportError:
        pass

  def ourjax_jit(self, f):
    return self.ourjax.jit(f, backend=self.target)

  def put(self, lib, tree):
    if lib is self.ourjax:
      dev = lib.devices(self.target)[0]
    else:
      dev = lib.devices()[0]
    return lib.tree_util.tree_map(lambda a: lib.device_put(a, dev), tree)


def _timed_first_call(f, args):
  t0 = time.perf_counter()
  out = _block(f(*args))
  return out, time.perf_counter() - t0


def _alternate(calls, repeat, min_time):
  """Median seconds per call of each function in ``calls`` (name -> thunk), called in turn
  (the order flips every round), at least ``repeat`` rounds and ``min_time`` seconds."""
  names = list(calls)
  times = {n: [] for n in names}
  t_end = time.perf_counter() + min_time
  rounds = 0
  while rounds < repeat or (time.perf_counter() < t_end and rounds < 200 * max(repeat, 1)):
    for n in (names if rounds % 2 == 0 else names[::-1]):
      t0 = time.perf_counter()
      _block(calls[n]())
      times[n].append(time.perf_counter() - t0)
    rounds += 1
  return {n: statistics.median(v) for n, v in times.items()}


def _peak_bytes(lib_jit, args):
  """The compiled function's memory in bytes as its library's ``memory_analysis()`` accounts
  it, the same sum for both: arguments + outputs + temporaries - what outputs reuse of donated
  arguments (JAX's ``peak_memory_in_bytes`` is not filled in on every platform); None when
  unavailable."""
  stats = lib_jit.lower(*args).compile().memory_analysis()
  if stats is None:
    return None
  parts = [getattr(stats, k, 0) or 0 for k in ("argument_size_in_bytes", "output_size_in_bytes",
                                               "temp_size_in_bytes")]
  return int(sum(parts) - (getattr(stats, "alias_size_in_bytes", 0) or 0)) or None


def run_workload(w, libs: Libs, timing=True, repeat=5, min_time=0.5, profile=False,
                 memory=False):
  """One table row (a dict) for workload ``w``; an exception becomes the row's ``error``.
  ``memory``: also each library's memory of the compiled step (``ourjax_peak_mb``,
  ``jax_peak_mb``: ``_peak_bytes``)."""
  oj, jx = libs.ourjax, libs.jax
  row = {"name": w["name"], "ourjax_compile_s": None, "jax_compile_s": None,
         "ourjax_ms": None, "jax_ms": None, "ratio": None, "check": None, "error": None}
  rtol, metric = tolerance(libs.target, libs.precision, w["tol"])
  stage = "ourjax"
  try:
    o_fn = w["make"](oj)
    o_jit = libs.ourjax_jit(o_fn)
    o_args = libs.put(oj, w["inputs"])
    o_out, row["ourjax_compile_s"] = _timed_first_call(o_jit, o_args)
    j_jit = j_args = None
    if jx is not None:
      stage = "JAX"
      j_jit = jx.jit(w["make"](jx))
      j_args = libs.put(jx, w["inputs"])
      ref, row["jax_compile_s"] = _timed_first_call(j_jit, j_args)
      against, lib_ref = "JAX", jx
    else:
      stage = "ourjax eager"
      with oj.disable_jit():
        ref = o_fn(*w["inputs"])
      against, lib_ref = "eager", oj
    stage = "check"
    ok, worst, where = compare(o_out, ref, rtol, args=w["inputs"], train=w["train"],
                               lib_ours=oj, lib_ref=lib_ref, metric=metric)
    # check_worst: the error over its tolerance (<= 1 passes)
    row.update(check="ok" if ok else "FAIL", check_against=against, check_worst=worst,
               check_detail=where, rtol=rtol, check_metric=metric)
    if timing:
      stage = "timing"
      _block(o_jit(*o_args))             # a warm-up call each
      calls = {"ourjax": lambda: o_jit(*o_args)}
      if j_jit is not None:
        _block(j_jit(*j_args))
        calls["jax"] = lambda: j_jit(*j_args)
      med = _alternate(calls, repeat, min_time)
      row["ourjax_ms"] = med["ourjax"] * 1e3
      if "jax" in med:
        row["jax_ms"] = med["jax"] * 1e3
        row["ratio"] = row["ourjax_ms"] / row["jax_ms"]
    if memory:
      stage = "memory"
      for lib, jitted, args in (("ourjax", o_jit, o_args), ("jax", j_jit, j_args)):
        if jitted is not None:
          b = _peak_bytes(jitted, args)
          row[f"{lib}_peak_mb"] = None if b is None else b / 2 ** 20
    if profile:
      stage = "profile"
      _profile_hook(libs, o_fn, o_args, w["name"])
  except Exception as e:   # noqa: BLE001  (reported in the row; the suite goes on)
    msg = f"{type(e).__name__}: {e}".splitlines()[0][:200]
    row["error"] = msg if stage == "ourjax" else f"({stage}) {msg}"
    row["traceback"] = traceback.format_exc()
    row["check"] = "error"
  return row


def _profile_hook(libs, fn, args, name):
  """``--profile``: ourjax's per-kernel table of the workload (``Compiled.profile``: kernels
  sorted by device time, with their kind, launches, bytes, rates and the HLO they cover)."""
  compiled = libs.ourjax_jit(fn).lower(*args).compile()
  print(f"--- profile of {name} ---")
  print(compiled.profile(*args, reps=5), flush=True)


def run_suite(target="cpu", small=False, with_jax=True, timing=True, only=None, repeat=5,
              min_time=0.5, profile=False, on_row=None, precision=None, memory=False):
  """Run the workloads (``only``: family or workload names) and return their rows."""
  libs = Libs(target, with_jax, precision)
  rows = []
  for w in workloads(target, small, only):
    row = run_workload(w, libs, timing=timing, repeat=repeat, min_time=min_time,
                       profile=profile, memory=memory)
    rows.append(row)
    if on_row is not None:
      on_row(row)
  return rows


# ------------------------------------------------------------------------------------------------
# The report


def machine(target: str, libs_have_jax: bool) -> dict:
  info = {"target": target, "cores": os.cpu_count(), "python": platform.python_version()}
  model, flags = platform.processor() or platform.machine(), set()
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        key, _, val = line.partition(":")
        key = key.strip()
        if key == "model name" and "cpu" not in info:
          info["cpu"] = val.strip()
        elif key == "flags" and not flags:
          flags = set(val.split())
  except OSError:
    pass
  info.setdefault("cpu", model)
  info["features"] = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile") if f in flags]
  import ourjax
  info["ourjax"] = ourjax.__version__ + _git_rev()
  if target == "cuda":
    try:
      info["gpu"] = ourjax.devices("cuda")[0].device_kind
    except Exception as e:   # noqa: BLE001
      info["gpu"] = f"unavailable ({e})"
  if libs_have_jax:
    import jax
    info["jax"] = jax.__version__
    info["jax_device"] = str(jax.devices()[0].device_kind)
  return info


def _git_rev() -> str:
  """`` (git HASH)``, with ``+changes`` when the tracked files differ from that commit (a copy
  of a working tree, as on a lent machine, is then not that commit)."""
  here = os.path.dirname(os.path.abspath(__file__))
  try:
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True, cwd=here, timeout=5)
    if rev.returncode != 0 or not rev.stdout.strip():
      return ""
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, cwd=here, timeout=10)
    mark = "+changes" if dirty.returncode == 0 and dirty.stdout.strip() else ""
    return f" (git {rev.stdout.strip()}{mark})"
  except (OSError, subprocess.SubprocessError):
    return ""


def machine_line(info: dict) -> str:
  feats = ", ".join(info["features"]) or "no AVX2"
  s = f"machine: {info['cpu']}, {info['cores']} cores ({feats})"
  if "gpu" in info:
    s += f"; GPU {info['gpu']}"
  s += f"; ourjax {info['ourjax']}"
  s += f", JAX {info['jax']} ({info['jax_device']})" if "jax" in info else ", no JAX"
  return s + f"; target {info['target']}"


HEADER = (f"{'workload':24s} {'ourjax compile s':>16s} {'JAX compile s':>13s} "
          f"{'ourjax step ms':>14s} {'JAX step ms':>11s} {'ratio':>6s}  check")


def format_row(row) -> str:
  def num(v, fmt):
    width = int(fmt.split(".")[0])
    return format(v, fmt) if isinstance(v, (int, float)) else "-".rjust(width)
  if row["error"]:
    check = f"ERROR {row['error']}"
  else:
    check = f"{row['check']} vs {row['check_against']} ({row['check_metric']} err/tol " \
            f"{row['check_worst']:.2g}, rtol {row['rtol']:g})"
  return (f"{row['name']:24s} {num(row['ourjax_compile_s'], '16.2f')} "
          f"{num(row['jax_compile_s'], '13.2f')} {num(row['ourjax_ms'], '14.3f')} "
          f"{num(row['jax_ms'], '11.3f')} {num(row['ratio'], '6.2f')}  {check}")


def geomean(values):
  values = [v for v in values if isinstance(v, (int, float)) and v > 0]
  return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summary(rows) -> str:
  step = geomean([r["ratio"] for r in rows])
  comp = geomean([r["ourjax_compile_s"] / r["jax_compile_s"] for r in rows
                  if r["ourjax_compile_s"] and r["jax_compile_s"]])
  f = lambda v: f"{v:.2f}" if v else "-"     # noqa: E731
  return f"geomean ourjax/JAX: step {f(step)}, compile {f(comp)} (below 1: ourjax faster)"


def memory_table(rows) -> str:
  """``--memory``: each workload's peak memory (MB) in each library and their ratio."""
  lines = [f"{'memory MB (args+outs+temps)':28s} {'ourjax':>10s} {'JAX':>10s} {'ratio':>6s}"]
  for r in rows:
    o, j = r.get("ourjax_peak_mb"), r.get("jax_peak_mb")
    f = lambda v: f"{v:10.1f}" if v else f"{'-':>10s}"     # noqa: E731
    lines.append(f"{r['name']:28s} {f(o)} {f(j)} " + (f"{o / j:6.2f}" if o and j else "     -"))
  return "\n".join(lines)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--target", choices=("cpu", "cuda"), default="cpu")
  ap.add_argument("--small", action="store_true", help="tiny sizes (what the tests run)")
  ap.add_argument("--only", default="", help="comma-separated workload or family names")
  ap.add_argument("--repeat", type=int, default=5, help="timing rounds at least")
  ap.add_argument("--min-time", type=float, default=0.5,
                  help="seconds of timing per workload at least")
  ap.add_argument("--json", default="", help="also write the rows and the machine as JSON")
  ap.add_argument("--no-jax", action="store_true", help="ourjax only (checks against eager)")
  ap.add_argument("--cache", action="store_true", help="keep ourjax's disk cache on")
  ap.add_argument("--matmul-precision", default=None,
                  help="both libraries' jax_default_matmul_precision (e.g. highest: no tf32)")
  ap.add_argument("--profile", action="store_true",
                  help="print ourjax's profile of each workload (when ourjax has a profiler)")
  ap.add_argument("--memory", action="store_true",
                  help="also print each library's memory per workload (memory_analysis: "
                  "arguments + outputs + temporaries)")
  a = ap.parse_args(argv)
  # before the first import of either library: the platform, and a cold compile cache
  if not a.cache:
    os.environ["OURJAX_CACHE_DIR"] = "off"
  os.environ["OURJAX_PLATFORMS"] = a.target
  if a.target == "cpu":
    os.environ["JAX_PLATFORMS"] = "cpu"
  os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
  only = set(filter(None, a.only.split(","))) or None
  known = set(FAMILIES) | {w["name"] for w in workloads(a.target, a.small)}
  if only and only - known:
    ap.error(f"unknown workloads {sorted(only - known)}; known: {sorted(known)}")

  libs_probe = Libs(a.target, not a.no_jax, a.matmul_precision)
  info = machine(a.target, libs_probe.jax is not None)
  print(machine_line(info))
  print(HEADER, flush=True)
  rows = run_suite(a.target, a.small, not a.no_jax, True, only, a.repeat, a.min_time,
                   a.profile, on_row=lambda r: print(format_row(r), flush=True),
                   precision=a.matmul_precision, memory=a.memory)
  print(summary(rows))
  if a.memory:
    print(memory_table(rows))
  bad = [r for r in rows if r["check"] != "ok"]
  for r in bad:
    if r.get("traceback"):
      print(f"\n{r['name']}: {r['traceback']}", file=sys.stderr)
    elif r.get("check_detail"):
      print(f"{r['name']}: check failed at {r['check_detail']}", file=sys.stderr)
  if a.json:
    with open(a.json, "w") as f:
      json.dump({"machine": info, "date": time.strftime("%Y-%m-%d"),
                 "rows": [{k: v for k, v in r.items() if k != "traceback"} for r in rows]},
                f, indent=1)
  return 1 if bad else 0


if __name__ == "__main__":
  sys.exit(main())
