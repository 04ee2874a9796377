"""Data-parallel training of a small transformer on every device, with ``ourjax.pmap`` (or
``jit`` with shardings: ``--jit``).

Each device holds a copy of the parameters and Adam's moments and takes its own slice of the
batch; the gradients are averaged over the devices with ``lax.pmean`` (NCCL on GPUs), so every
copy takes the same step.  The script prints the loss and the throughput, per device and in
all.  On a machine without GPUs, ``OURJAX_NUM_CPU_DEVICES=4`` gives four CPU devices.

    python examples/data_parallel.py
    python examples/data_parallel.py --steps 50 --batch 16 --devices 2
    python examples/data_parallel.py --jit      # jit with shardings instead of pmap

``make_step(lib)`` and ``init(...)`` take the library as an argument, so that
``benchmarks/multigpu.py`` runs the same program with JAX for comparison.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from ourjax.tree_util import tree_map   # (on NumPy trees: the benchmark runs JAX on them too)

CFG = dict(seq=128, dim=256, heads=4, layers=2, vocab=512)


def make_step(lib, cfg=CFG, axis="devices"):
  """The per-device training step: ``step(params, opt, x, labels) -> params, opt, loss``
  (``step.loss(params, x, labels)`` is the model's loss on one batch).  Its gradients are
  averaged over the devices of the named ``axis``; ``axis=None`` makes the one-device step
  (``benchmarks/models.py``'s transformer)."""
  jnp, nn, lax = lib.numpy, lib.nn, lib.lax
  heads, vocab = cfg["heads"], cfg["vocab"]
  b1, b2, lr, eps = 0.9, 0.999, 1e-3, 1e-8

  def layernorm(x, g, b):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + 1e-5) * g + b

  def attention(x, p):
    B, T, D = x.shape
    q, k, v = jnp.split(x @ p["w_qkv"], 3, axis=-1)

    def heads_first(t):
      return t.reshape(B, T, heads, D // heads).transpose(0, 2, 1, 3)
    q, k, v = heads_first(q), heads_first(k), heads_first(v)
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.float32(np.sqrt(D // heads))
    causal = jnp.tril(jnp.ones((T, T), dtype=bool))
    a = nn.softmax(jnp.where(causal, s, -1e9), axis=-1)
    o = jnp.einsum("bhqk,bhkd->bhqd", a, v)
    return o.transpose(0, 2, 1, 3).reshape(B, T, D) @ p["w_o"]

  def loss(params, x, labels):
    for p in params["blocks"]:
      x = x + attention(layernorm(x, p["ln1_g"], p["ln1_b"]), p)
      h = nn.gelu(layernorm(x, p["ln2_g"], p["ln2_b"]) @ p["w_up"] + p["b_up"])
      x = x + h @ p["w_down"] + p["b_down"]
    logits = layernorm(x, params["lnf_g"], params["lnf_b"]) @ params["w_out"]
    logp = nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.sum(logp * nn.one_hot(labels, vocab), axis=-1))

  def step(params, opt, x, labels):
    m, v, t = opt
    value, grads = lib.value_and_grad(loss)(params, x, labels)
    if axis is not None:
      grads = lax.pmean(grads, axis)          # the all-reduce of data parallelism
      value = lax.pmean(value, axis)
    tmap = lib.tree_util.tree_map
    m = tmap(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
    v = tmap(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
    t = t + 1.0
    c1, c2 = 1.0 - b1 ** t, 1.0 - b2 ** t
    params = tmap(lambda p, m, v: p - lr * (m / c1) / (jnp.sqrt(v / c2) + eps), params, m, v)
    return params, (m, v, t), value
  step.loss = loss
  return step


def init(seed, cfg=CFG):
  """Parameters and Adam state as NumPy trees."""
  rng = np.random.default_rng(seed)
  D, V = cfg["dim"], cfg["vocab"]
  s = 1.0 / np.sqrt(D)
  normal = lambda shape, sc: (rng.standard_normal(shape) * sc).astype(np.float32)  # noqa: E731

  def block():
    return {"ln1_g": np.ones(D, np.float32), "ln1_b": np.zeros(D, np.float32),
            "w_qkv": normal((D, 3 * D), s), "w_o": normal((D, D), s),
            "ln2_g": np.ones(D, np.float32), "ln2_b": np.zeros(D, np.float32),
            "w_up": normal((D, 4 * D), s), "b_up": np.zeros(4 * D, np.float32),
            "w_down": normal((4 * D, D), s / 2), "b_down": np.zeros(D, np.float32)}
  params = {"blocks": [block() for _ in range(cfg["layers"])],
            "lnf_g": np.ones(D, np.float32), "lnf_b": np.zeros(D, np.float32),
            "w_out": normal((D, V), s)}
  zeros = lambda tree: tree_map(np.zeros_like, tree)  # noqa: E731
  return params, (zeros(params), zeros(params), np.float32(0.0))


def batch(seed, n_dev, per_device, cfg=CFG):
  """A batch split over ``n_dev`` devices: x [n_dev, b, T, D], labels [n_dev, b, T] (device
  k's part is the same whatever ``n_dev``)."""
  xs, ls = [], []
  for k in range(n_dev):
    rng = np.random.default_rng(seed * 1000 + k)
    xs.append(rng.standard_normal((per_device, cfg["seq"], cfg["dim"])).astype(np.float32))
    ls.append(rng.integers(0, cfg["vocab"], (per_device, cfg["seq"])).astype(np.int32))
  return np.stack(xs), np.stack(ls)


def replicate(tree, n):
  """Each leaf stacked ``n`` times along a new leading axis (one copy per device)."""
  return tree_map(lambda a: np.broadcast_to(np.asarray(a), (n,) + np.shape(a)).copy(), tree)


def main(argv=None):
  import ourjax
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--steps", type=int, default=20)
  ap.add_argument("--batch", type=int, default=8, help="examples per device")
  ap.add_argument("--devices", type=int, default=0, help="how many devices (0: all)")
  ap.add_argument("--jit", action="store_true",
                  help="jit with shardings (batch split, parameters replicated) instead of pmap")
  a = ap.parse_args(argv)
  devs = ourjax.devices()
  n = a.devices or len(devs)
  devs = devs[:n]
  print(f"{n} device(s): {devs}")
  params, opt = init(0)
  if a.jit:
    # the one-device step, partitioned: the compiler inserts the gradients' all-reduce
    from ourjax.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = Mesh(np.array(devs, dtype=object), ("batch",))
    rep, split = NamedSharding(mesh, P()), NamedSharding(mesh, P("batch"))
    one = ourjax.jit(make_step(ourjax, axis=None), in_shardings=(rep, rep, split, split),
                     out_shardings=(rep, rep, rep))

    def step(params, opt, x, labels):
      flat = lambda t: t.reshape((-1,) + t.shape[2:])  # noqa: E731  [n, b, ...] -> [n*b, ...]
      params, opt, loss = one(params, opt, flat(x), flat(labels))
      return params, opt, np.broadcast_to(np.asarray(loss), (n,))
  else:
    step = ourjax.pmap(make_step(ourjax), axis_name="devices", devices=devs)
    params, opt = replicate(params, n), replicate(opt, n)
  t_first = None
  t0 = time.perf_counter()
  for i in range(a.steps):
    x, labels = batch(1000 + i, n, a.batch)
    params, opt, loss = step(params, opt, x, labels)
    if i == 0:
      ourjax.block_until_ready(loss)
      t_first = time.perf_counter() - t0
      t0 = time.perf_counter()
    if i % 5 == 0 or i == a.steps - 1:
      print(f"step {i:3d}  loss {float(np.asarray(loss)[0]):.4f}")
  ourjax.block_until_ready(params)
  dt = (time.perf_counter() - t0) / max(a.steps - 1, 1)
  per = a.batch * CFG["seq"]
  print(f"first step (compile) {t_first:.2f} s; then {dt * 1e3:.1f} ms a step: "
        f"{per / dt:,.0f} tokens/s per device, {n * per / dt:,.0f} in all")


if __name__ == "__main__":
  main()
