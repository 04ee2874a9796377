"""Programs covering every kind of kernel the CUDA backend emits (shared by test_ptx.py, which
assembles their PTX, and test_cuda.py, which runs them on a GPU against the reference backend).

Each case is ``(name, fn, make_args, tol)``: ``make_args(rng)`` draws fresh inputs (never zeros),
``tol`` is the relative error allowed (‖out − ref‖ / ‖ref‖ for floats; integers and booleans
are compared exactly) and ``kind`` names the GPU kernel the case is meant to reach.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

import ourjax
import ourjax.numpy as jnp
from ourjax import lax

BF16 = ml_dtypes.bfloat16


def f32(rng, *shape, lo=-2.0, hi=2.0):
  return rng.uniform(lo, hi, shape).astype(np.float32)


def _ln(x, g, b):
  m = x.mean(-1, keepdims=True)
  v = ((x - m) ** 2).mean(-1, keepdims=True)
  return (x - m) * lax.rsqrt(v + 1e-5) * g + b


def _mlp_loss(params, x, y):
  w1, b1, w2, b2 = params
  h = jnp.tanh(x @ w1 + b1)
  out = h @ w2 + b2
  return jnp.mean((out - y) ** 2)


def _mlp_step(params, x, y):
  loss, grads = ourjax.value_and_grad(_mlp_loss)(params, x, y)
  return loss, [p - 0.01 * g for p, g in zip(params, grads)]


def _mlp_args(rng):
  return ([f32(rng, 256, 512, lo=-0.05, hi=0.05), f32(rng, 512, lo=-0.1, hi=0.1),
           f32(rng, 512, 128, lo=-0.05, hi=0.05), f32(rng, 128, lo=-0.1, hi=0.1)],
          f32(rng, 128, 256), f32(rng, 128, 128))


def _mlp_square_args(rng):
  # batch == hidden: the bias gradient (a sum over the batch) has the shape of a row, so the
  # planner puts it in a row kernel; the GPU backend computes it by column partials
  return ([f32(rng, 128, 256, lo=-0.05, hi=0.05), f32(rng, 256, lo=-0.1, hi=0.1),
           f32(rng, 256, 128, lo=-0.05, hi=0.05), f32(rng, 128, lo=-0.1, hi=0.1)],
          f32(rng, 256, 128), f32(rng, 256, 128))


def _fori(x):
  return lax.fori_loop(0, 5, lambda i, c: c * 0.5 + jnp.sin(c), x)


def _cond(p, x):
  return lax.cond(p > 0, lambda v: v * 2.0, lambda v: v - 1.0, x)


def _scatter_add(x, idx, upd):
  return x.at[idx].add(upd)


def _dus(x, u, i):
  return lax.dynamic_update_slice(x, u, (i, 0))


CASES = [
    # elementwise (Elementwise)
    ("ew_f32", lambda a, b: jnp.sin(a) * 2.0 + b * b - 1.0,
     lambda r: (f32(r, 1000, 513), f32(r, 1000, 513)), 1e-5),
    ("ew_broadcast", lambda a, b: jnp.exp(a) + b,
     lambda r: (f32(r, 512, 384), f32(r, 384)), 1e-5),
    ("ew_gelu", lambda a: ourjax.nn.gelu(a, approximate=False),
     lambda r: (f32(r, 4096, 257),), 1e-5),
    ("ew_tail", lambda a: a * 3.0 + 1.0, lambda r: (f32(r, 1027),), 1e-6),
    ("ew_bf16", lambda a, b: (a * b + a).astype(jnp.float32),
     lambda r: (f32(r, 300, 200).astype(BF16), f32(r, 300, 200).astype(BF16)), 1e-2),
    ("ew_f16", lambda a: jnp.tanh(a) * a,
     lambda r: (f32(r, 640, 33).astype(np.float16),), 2e-3),
    ("ew_int", lambda a, b: (a * 3 + b) // 7 - (a % 5),
     lambda r: (r.integers(-1000, 1000, (777,), dtype=np.int32),
                r.integers(1, 1000, (777,), dtype=np.int32)), 0),
    ("ew_bool", lambda a, b: jnp.where(a > b, a, b) + (a > 0.5),
     lambda r: (f32(r, 123, 45), f32(r, 123, 45)), 1e-6),
    ("ew_transpose", lambda a: jnp.transpose(a) * 2.0 + 1.0,
     lambda r: (f32(r, 333, 129),), 1e-6),
    # tiled transposes (transpose.TiledTranspose): batched, two heroes, a rotation, narrow types
    ("transpose_batched", lambda a, b: jnp.swapaxes(a, 1, 2) * b,
     lambda r: (f32(r, 6, 70, 45), f32(r, 6, 45, 70)), 1e-6),
    ("transpose_two_f16", lambda a, b: a.T + jnp.exp(b).T,
     lambda r: (f32(r, 100, 50).astype(np.float16), f32(r, 100, 50).astype(np.float16)), 2e-3),
    ("transpose_rotate", lambda a: jnp.transpose(jnp.sin(a), (2, 0, 1)) - 1.0,
     lambda r: (f32(r, 33, 40, 50),), 1e-6),
    ("transpose_bool_int8", lambda a, b: (jnp.transpose(a > 0) & (b > 0), b.T * 3),
     lambda r: (f32(r, 64, 48), r.integers(-40, 40, (48, 64), dtype=np.int8)), 0),
    ("ew_concat_pad", lambda a, b: jnp.pad(jnp.concatenate([a, b], 0), ((1, 2), (3, 0))),
     lambda r: (f32(r, 40, 30), f32(r, 20, 30)), 0),
    ("ew_iota_slice", lambda a: a[::2, 1:] + jnp.arange(a.shape[1] - 1, dtype=jnp.float32),
     lambda r: (f32(r, 64, 65),), 1e-6),
    ("gather_take", lambda a, i: jnp.take(a, i, axis=0),
     lambda r: (f32(r, 100, 64), r.integers(0, 100, (300,), dtype=np.int32)), 0),
    # reductions
    ("sum_all", lambda a: jnp.sum(a), lambda r: (f32(r, 1 << 20, lo=0.0),), 1e-5),
    ("sum_all_2d", lambda a: jnp.sum(a * a), lambda r: (f32(r, 1000, 999),), 1e-5),
    ("sum_rows", lambda a: jnp.sum(a, axis=1), lambda r: (f32(r, 2048, 1000),), 1e-5),
    ("sum_cols", lambda a: jnp.sum(a, axis=0), lambda r: (f32(r, 3000, 257),), 1e-5),
    ("mean_middle", lambda a: jnp.mean(a, axis=1), lambda r: (f32(r, 6, 500, 7),), 1e-5),
    ("max_rows", lambda a: jnp.max(a, axis=-1), lambda r: (f32(r, 700, 300),), 0),
    ("min_all_int", lambda a: jnp.min(a), lambda r: (r.integers(-10**6, 10**6, (100000,),
                                                                 dtype=np.int32),), 0),
    ("prod_rows", lambda a: jnp.prod(a, axis=-1), lambda r: (f32(r, 64, 40, lo=0.9, hi=1.1),),
     1e-5),
    ("any_all", lambda a: (jnp.any(a > 1.9, axis=0), jnp.all(a > -1.99, axis=1)),
     lambda r: (f32(r, 200, 300),), 0),
    ("reduce_dims_02", lambda a: jnp.sum(a, axis=(0, 2)), lambda r: (f32(r, 16, 20, 30),),
     1e-5),
    ("argmax_rows", lambda a: jnp.argmax(a, axis=-1), lambda r: (f32(r, 300, 1000),), 0),
    ("softmax", lambda a: ourjax.nn.softmax(a, axis=-1), lambda r: (f32(r, 512, 1000),), 1e-5),
    ("layernorm", _ln, lambda r: (f32(r, 384, 768), f32(r, 768), f32(r, 768)), 1e-5),
    ("logsumexp", lambda a: ourjax.nn.logsumexp(a, axis=-1), lambda r: (f32(r, 100, 4099),),
     1e-5),
    # dot
    ("dot_tf32", lambda a, b: a @ b, lambda r: (f32(r, 256, 384), f32(r, 384, 128)), 5e-3),
    ("dot_odd", lambda a, b: a @ b, lambda r: (f32(r, 100, 70), f32(r, 70, 33)), 1e-5),
    ("dot_bf16", lambda a, b: jnp.matmul(a, b, preferred_element_type=jnp.float32),
     lambda r: (f32(r, 256, 256).astype(BF16), f32(r, 256, 128).astype(BF16)), 1e-2),
    ("dot_f16_out", lambda a, b: a @ b,
     lambda r: (f32(r, 128, 64).astype(np.float16), f32(r, 64, 256).astype(np.float16)), 1e-2),
    ("dot_batched", lambda a, b: jnp.einsum("bij,bjk->bik", a, b),
     lambda r: (f32(r, 3, 128, 96), f32(r, 3, 96, 128)), 5e-3),
    ("dot_transposed", lambda a, b: a.T @ b, lambda r: (f32(r, 256, 128), f32(r, 256, 256)),
     5e-3),
    ("dot_nt", lambda a, b: a @ b.T, lambda r: (f32(r, 256, 128), f32(r, 384, 128)), 5e-3),
    ("dot_bf16_tt", lambda a, b: jnp.matmul(a.T, b.T, preferred_element_type=jnp.float32),
     lambda r: (f32(r, 64, 128).astype(BF16), f32(r, 256, 64).astype(BF16)), 1e-2),
    ("dot_f16_tn", lambda a, b: a.T @ b,
     lambda r: (f32(r, 96, 128).astype(np.float16), f32(r, 96, 256).astype(np.float16)), 1e-2),
    ("dot_vec", lambda a, b: a @ b, lambda r: (f32(r, 300, 77), f32(r, 77)), 1e-5),
    ("mlp_step", _mlp_step, _mlp_args, 1e-2),
    ("mlp_square", _mlp_step, _mlp_square_args, 1e-2),
    ("bias_update", lambda g, bias: (jnp.where(g > 0, g, 0.0), bias - 0.1 * jnp.sum(g, axis=0)),
     lambda r: (f32(r, 384, 384), f32(r, 384)), 1e-5),
    # other ops (Threaded kernels, control flow)
    ("sort", lambda a: jnp.sort(a, axis=-1), lambda r: (f32(r, 20, 300),), 0),
    ("cumsum", lambda a: jnp.cumsum(a, axis=-1), lambda r: (f32(r, 30, 200),), 1e-5),
    ("scatter_add", _scatter_add,
     lambda r: (f32(r, 50, 8), r.integers(0, 50, (40,), dtype=np.int32), f32(r, 40, 8)), 1e-6),
    ("dynamic_update_slice", _dus,
     lambda r: (f32(r, 64, 16), f32(r, 8, 16), np.int32(r.integers(0, 60))), 0),
    ("fori_loop", _fori, lambda r: (f32(r, 1000),), 1e-5),
    ("cond", _cond, lambda r: (np.float32(r.choice([-1.0, 1.0])), f32(r, 257)), 0),
]

CASE_NAMES = [c[0] for c in CASES]
