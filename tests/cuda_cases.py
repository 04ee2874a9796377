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


def _i8(rng, *shape, dtype=np.int8):
  """Random 8-bit integers over the type's whole range (zeros included)."""
  info = np.iinfo(dtype)
  return rng.integers(info.min, int(info.max) + 1, shape).astype(dtype)


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
    # huge arguments, inf and NaN: the sin/cos slow path (once per vector of elements)
    ("ew_sin_large", lambda a: jnp.sin(a) * 2.0 + jnp.cos(a),
     lambda r: (np.where(r.random(4099) < 0.01, np.float32(np.inf), np.where(
         r.random(4099) < 0.3, f32(r, 4099), f32(r, 4099) * 3e5)).astype(np.float32),), 1e-6),
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
    ("ew_concat_many", lambda *a: jnp.concatenate([jnp.exp(v) * k for k, v in enumerate(a)], 1),
     lambda r: tuple(f32(r, 33, 3 + k) for k in range(7)), 1e-6),
    ("conv_im2col", lambda x, w: lax.conv_general_dilated(
        x, w, (1, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")),
     lambda r: (f32(r, 4, 12, 13, 8), f32(r, 3, 3, 8, 16)), 5e-3),
    # split-K: few output tiles, a long contraction (a convolution's weight gradient)
    # (at the highest precision: on the CUDA cores, not tf32 tensor cores)
    ("dot_split_k", lambda a, b, c: jnp.tanh(jnp.matmul(a, b, precision="highest") + c),
     lambda r: (f32(r, 70, 8192, lo=-0.1, hi=0.1), f32(r, 8192, 40), f32(r, 40)), 1e-5),
    ("conv_weight_grad", ourjax.grad(lambda w, x: jnp.sum(lax.conv_general_dilated(
        x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")) ** 2)),
     lambda r: (f32(r, 3, 3, 8, 16), f32(r, 8, 20, 20, 8)), 5e-3),
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
    # few outputs, long columns: thousands of partials per output, combined by a block each
    ("sum_cols_tall", lambda a: jnp.sum(a, axis=0), lambda r: (f32(r, 40000, 24),), 1e-5),
    ("max_cols_tall", lambda a: jnp.max(a, axis=(0, 1)), lambda r: (f32(r, 200, 300, 12),), 0),
    ("bias_update_tall", lambda g, bias: (g * 2.0, bias - 0.1 * jnp.sum(g, axis=0)),
     lambda r: (f32(r, 30000, 16), f32(r, 16)), 1e-5),
    # sibling column reductions of one fusion (a batchnorm gradient's sums): one pass over the
    # input; the variance reads the mean, so it is not a sibling
    ("column_siblings", lambda x, y: (jnp.sum(x * y, axis=0), jnp.sum(x, axis=0),
                                      jnp.max(x - y, axis=0),
                                      jnp.sum((x - jnp.mean(x, axis=0)) ** 2, axis=0)),
     lambda r: (f32(r, 20000, 24), f32(r, 20000, 24)), 1e-5),
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
    # integer max/min over negated values: the CUDA 13.0 driver's ptxas computed a chain of
    # max.s32 over negations wrongly (emitter._ptx_select_minmax); small and wide reductions
    ("int_max_of_negated", lambda a: (jnp.max(-a), jnp.min(-jnp.abs(a)), jnp.max(-a, axis=1),
                                      jnp.max(-jnp.abs(a[0])), jnp.max(-a[1])),
     lambda r: (r.integers(-30, 30, (5, 3)).astype(np.int32),), 0),
    ("uint_min_of_negated", lambda a: (jnp.min(-a), jnp.max(-a[0]), jnp.min(0 - a, axis=1)),
     lambda r: (r.integers(0, 30, (5, 3)).astype(np.uint32),), 0),
    ("int8_max_of_negated", lambda a: jnp.max(-a, axis=0),
     lambda r: (r.integers(-100, 100, (7, 300)).astype(np.int8),), 0),
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
    # epilogues fused into the dot kernel (dots.fuse_dot_epilogues): bias + activation,
    # a residual, a batched epilogue, bf16 results, and the SimtDot fallback (f64-free odd sizes)
    ("dot_epilogue_bias_gelu", lambda a, b, c: ourjax.nn.gelu(a @ b + c),
     lambda r: (f32(r, 256, 128), f32(r, 128, 256), f32(r, 256)), 5e-3),
    ("dot_epilogue_residual_tt", lambda a, b, c: jnp.maximum(a.T @ b + c, 0.0) * 2.0,
     lambda r: (f32(r, 128, 256), f32(r, 128, 384), f32(r, 256, 384)), 5e-3),
    ("dot_epilogue_batched_bf16",
     lambda a, b: jnp.tanh(jnp.einsum("bij,bjk->bik", a, b)).astype(jnp.bfloat16),
     lambda r: (f32(r, 3, 128, 64).astype(BF16), f32(r, 3, 64, 256).astype(BF16)), 1e-2),
    ("dot_epilogue_simt", lambda a, b: jnp.exp(-(a @ b) ** 2),
     lambda r: (f32(r, 30, 70), f32(r, 70, 33)), 1e-5),
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
    # reduce-window: pooling, its gradient (a two-operand reduce-window choosing positions, then
    # a scatter-add), and an init value that is not the identity (padding and holes skipped)
    ("max_pool", lambda a: lax.reduce_window(a, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1),
                                             "SAME"), lambda r: (f32(r, 2, 33, 34, 8),), 0),
    ("max_pool_grad", lambda a: ourjax.grad(lambda x: jnp.sum(lax.reduce_window(
        x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "SAME") ** 2))(a),
     lambda r: (f32(r, 2, 17, 18, 8),), 1e-6),
    ("window_sum_init", lambda a: lax.reduce_window(a, 1.0, lax.add, (3, 2), (1, 2),
                                                    ((1, 2), (0, 1)), (2, 1)),
     lambda r: (f32(r, 40, 50),), 1e-6),
]


# sort (sort_scatter.GpuSort: a bitonic network per row in shared memory) and scatter
# (sort_scatter.GpuScatter: one thread per update, atomics).  Sorts are exact: every lax sort
# is stable and the GPU breaks comparator ties by position, so even the order of -0.0/+0.0 and
# of equal keys' payloads matches (outputs compared as bits where signed zeros matter).
# Scatter tolerances: an atomic float combine adds duplicates in any order; both the reference
# and the GPU sum m terms in f32, each within (m - 1) eps sum|terms| of the exact sum, so with
# m duplicates of magnitude <= 2 onto values <= 2 the norm-relative difference stays below
# 2 (m - 1) eps sum|terms| / |sum| (the bound is stated per case).

def _special_f32(r, *shape):
  """Floats with many ties: NaN, +-inf, -0.0 and +0.0, repeated values, random ones."""
  pool = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.5, -1.5, 2.0], np.float32)
  x = f32(r, *shape)
  pick = r.random(shape) < 0.5
  return np.where(pick, pool[r.integers(0, len(pool), shape)], x).astype(np.float32)


def _bits(x):
  return lax.bitcast_convert_type(x, jnp.int32)


def _sort_multi(k1, k2, v):
  return lax.sort((k1, k2, v), dimension=-1, num_keys=2)


def _segment_sum(data, seg):
  return jnp.zeros((64, data.shape[1]), data.dtype).at[seg].add(data)


def _take_grad(x, idx):
  return ourjax.grad(lambda v: jnp.sum(jnp.take(v, idx, axis=0) ** 2))(x)


def _scatter_2d(x, i, j, u):
  return x.at[i, j].add(u)


def _dup_idx(r, n, m):
  return r.integers(0, n, (m,), dtype=np.int32)


SORT_SCATTER_CASES = [
    ("sort_f32_special", lambda a: _bits(jnp.sort(a, axis=-1)),
     lambda r: (_special_f32(r, 16, 1000),), 0),
    ("sort_i32", lambda a: jnp.sort(a, axis=-1),
     lambda r: (r.integers(-50, 50, (64, 1000), dtype=np.int32),), 0),
    ("sort_bf16", lambda a: jnp.sort(a, axis=-1).astype(jnp.float32),
     lambda r: (f32(r, 30, 333).astype(BF16),), 0),
    ("sort_multi_keys", _sort_multi,
     lambda r: (r.integers(0, 4, (24, 700), dtype=np.int32),
                r.integers(0, 3, (24, 700)).astype(np.float32), f32(r, 24, 700)), 0),
    ("argsort_ties", lambda a: jnp.argsort(a, axis=-1),
     lambda r: (r.integers(0, 4, (8, 5000), dtype=np.int32),), 0),
    ("sort_rows_of_1", lambda a: jnp.sort(a, axis=-1), lambda r: (f32(r, 50, 1),), 0),
    ("sort_rows_of_7", lambda a: jnp.sort(a, axis=-1), lambda r: (f32(r, 1000, 7),), 0),
    ("sort_row_1000", lambda a: jnp.sort(a), lambda r: (f32(r, 1000),), 0),
    ("sort_rows_5000", lambda a: _bits(jnp.sort(a, axis=-1)),
     lambda r: (_special_f32(r, 3, 5000),), 0),
    ("sort_axis0", lambda a: jnp.sort(a, axis=0), lambda r: (f32(r, 300, 5),), 0),
    # rows too long for shared memory: chunks sorted in shared memory, merged in global memory
    ("sort_long_rows", lambda a: _bits(jnp.sort(a, axis=-1)),
     lambda r: (_special_f32(r, 2, 100000),), 0),
    ("argsort_long_row", lambda a: jnp.argsort(a),
     lambda r: (r.integers(0, 1000, (300000,), dtype=np.int32),), 0),
    ("top_k", lambda a: lax.top_k(a, 5), lambda r: (f32(r, 40, 500),), 0),
    # scatter-add, f32 with ~80 duplicates per row: bound 2 * 79 * 6e-8 * 160 / 20 ~ 8e-5
    ("scatter_add_dups", _scatter_add,
     lambda r: (f32(r, 50, 16), _dup_idx(r, 50, 4000), f32(r, 4000, 16)), 1e-4),
    ("scatter_add_i32", _scatter_add,
     lambda r: (r.integers(-100, 100, (50, 16), dtype=np.int32), _dup_idx(r, 50, 4000),
                r.integers(-100, 100, (4000, 16), dtype=np.int32)), 0),
    ("scatter_min_f32", lambda x, i, u: x.at[i].min(u),
     lambda r: (f32(r, 100, 8), _dup_idx(r, 100, 900), f32(r, 900, 8)), 0),
    ("scatter_max_f32", lambda x, i, u: x.at[i].max(u),
     lambda r: (f32(r, 100, 8), _dup_idx(r, 100, 900), f32(r, 900, 8)), 0),
    ("scatter_max_i32", lambda x, i, u: x.at[i].max(u),
     lambda r: (r.integers(-1000, 1000, (100, 8), dtype=np.int32), _dup_idx(r, 100, 900),
                r.integers(-1000, 1000, (900, 8), dtype=np.int32)), 0),
    ("scatter_min_u8", lambda x, i, u: x.at[i].min(u),
     lambda r: (r.integers(1, 255, (100,), dtype=np.uint8), _dup_idx(r, 100, 700),
                r.integers(1, 255, (700,), dtype=np.uint8)), 0),
    # products of ~9 factors in [0.9, 1.1] in any order: bound 2 * 9 * 6e-8 ~ 1.1e-6
    ("scatter_mul_f32", lambda x, i, u: x.at[i].mul(u),
     lambda r: (f32(r, 100, 8), _dup_idx(r, 100, 900), f32(r, 900, 8, lo=0.9, hi=1.1)), 2e-6),
    # bf16 adds of positive terms, ~3 per element, each rounded to bf16 (eps 2^-8): 2 * 3 * 2^-8
    ("scatter_add_bf16", _scatter_add,
     lambda r: (f32(r, 300, 4, lo=0.5).astype(BF16), _dup_idx(r, 300, 900),
                f32(r, 900, 4, lo=0.5).astype(BF16)), 2.5e-2),
    ("scatter_sub_i32", lambda x, i, u: x.at[i].subtract(u),
     lambda r: (r.integers(-100, 100, (64,), dtype=np.int32), _dup_idx(r, 64, 1000),
                r.integers(-100, 100, (1000,), dtype=np.int32)), 0),
    ("scatter_set_unique", lambda x, i, u: x.at[i].set(u),
     lambda r: (f32(r, 500, 8), r.permutation(500)[:300].astype(np.int32), f32(r, 300, 8)), 0),
    # duplicates that all write the same value: any winner gives the same result
    ("scatter_set_dups_same_value", lambda x, i: x.at[i].set(7.0),
     lambda r: (f32(r, 200, 8), _dup_idx(r, 200, 1000)), 0),
    ("scatter_add_out_of_bounds", lambda x, i, u: x.at[i].add(u, mode="drop"),
     lambda r: (r.integers(-9, 9, (40, 3), dtype=np.int32),
                r.integers(-60, 60, (300,), dtype=np.int32),
                r.integers(-9, 9, (300, 3), dtype=np.int32)), 0),
    ("scatter_add_clip", lambda x, i, u: x.at[i].add(u, mode="clip"),
     lambda r: (r.integers(-9, 9, (40, 3), dtype=np.int32),
                r.integers(-60, 60, (300,), dtype=np.int32),
                r.integers(-9, 9, (300, 3), dtype=np.int32)), 0),
    ("scatter_add_2d_index", _scatter_2d,
     lambda r: (r.integers(-9, 9, (30, 20), dtype=np.int32), _dup_idx(r, 30, 2000),
                _dup_idx(r, 20, 2000), r.integers(-9, 9, (2000,), dtype=np.int32)), 0),
    # segment sums of ~30 f32 terms per row: bound 2 * 29 * 6e-8 * 60 / 10 ~ 2e-5
    ("segment_sum", _segment_sum,
     lambda r: (f32(r, 2000, 32), np.sort(_dup_idx(r, 64, 2000))), 3e-5),
    # gather's transpose is a scatter-add of 2 x[idx]: ~6 duplicates per row
    ("take_grad", _take_grad,
     lambda r: (f32(r, 100, 16), _dup_idx(r, 100, 600)), 1e-5),
]
CASES += SORT_SCATTER_CASES

# Hopper dots (wgmma.WgmmaDot; sm_90a): each operand layout and dtype the kernel takes, odd and
# even numbers of k slices, 128- and 256-wide tiles.  f32 is multiplied in tf32: the transposed
# register form rounds B (to nearest) and truncates A, ~4e-4 norm-relative at these sizes.
WGMMA_CASES = [
    ("dot_wgmma_tf32", lambda a, b: a @ b, lambda r: (f32(r, 256, 256), f32(r, 256, 512)), 5e-3),
    ("dot_wgmma_tf32_odd_k", lambda a, b: a @ b,
     lambda r: (f32(r, 128, 160), f32(r, 160, 256)), 5e-3),
    ("dot_wgmma_tf32_nt", lambda a, b: a @ b.T,
     lambda r: (f32(r, 256, 96), f32(r, 256, 96)), 5e-3),
    ("dot_wgmma_bf16", lambda a, b: jnp.matmul(a, b, preferred_element_type=jnp.float32),
     lambda r: (f32(r, 128, 192).astype(BF16), f32(r, 192, 256).astype(BF16)), 1e-3),
    ("dot_wgmma_bf16_nt", lambda a, b: a @ b.T,
     lambda r: (f32(r, 256, 128).astype(BF16), f32(r, 384, 128).astype(BF16)), 1e-2),
    ("dot_wgmma_f16_batched", lambda a, b: jnp.einsum("bij,bjk->bik", a, b),
     lambda r: (f32(r, 2, 128, 128).astype(np.float16), f32(r, 2, 128, 256).astype(np.float16)),
     1e-2),
    # sizes the tiles do not divide: zeros loaded past the edges, stores guarded; one warpgroup
    # for 64 rows or fewer; 32-, 64- and 128-wide tiles; a k tail of part of a slice
    ("dot_wgmma_edges", lambda a, b: a @ b, lambda r: (f32(r, 200, 100), f32(r, 100, 72)), 5e-3),
    ("dot_wgmma_narrow_nt", lambda a, b: a @ b.T,
     lambda r: (f32(r, 90, 36), f32(r, 27, 36)), 5e-3),
    ("dot_wgmma_bf16_edges", lambda a, b: jnp.matmul(a, b, preferred_element_type=jnp.float32),
     lambda r: (f32(r, 130, 72).astype(BF16), f32(r, 72, 200).astype(BF16)), 1e-2),
    ("dot_wgmma_batched_edges", lambda a, b: jnp.einsum("bij,bjk->bik", a, b),
     lambda r: (f32(r, 3, 40, 20), f32(r, 3, 20, 52)), 5e-3),
    # tf32, B row-major and narrow, A tall: B is copied K-major, A takes the 128-row operand
    ("dot_wgmma_narrow_b", lambda a, b: a @ b,
     lambda r: (f32(r, 2048, 96), f32(r, 96, 48)), 5e-3),
    # a weight gradient (27 x 64 outputs, 32768 products each): M-major A copied K-major, the
    # contraction split across blocks into partial products, summed with the epilogue applied
    ("dot_wgmma_split_k", lambda a, b, c: jnp.maximum(a.T @ b + c, 0.0),
     lambda r: (f32(r, 32768, 27), f32(r, 32768, 64), f32(r, 64)), 5e-3),
    # a batched product of few tiles and a long contraction: split along k per matrix (partial
    # products [S, B, M, N]), bf16 and f32 with odd sizes
    ("dot_wgmma_batched_split_k", lambda a, b: jnp.einsum("bik,bkj->bij", a, b),
     lambda r: (f32(r, 3, 40, 4096), f32(r, 3, 4096, 72)), 5e-3),
    ("dot_wgmma_batched_split_k_bf16", lambda a, b: jnp.einsum("bik,bjk->bij", a, b),
     lambda r: (f32(r, 2, 64, 8192).astype(BF16), f32(r, 2, 96, 8192).astype(BF16)), 2e-2),
    # a weight gradient whose B is the smaller: B copied K-major, A (M-major) read from a
    # [k][m] tile as the register operand; odd sizes at every edge
    ("dot_wgmma_wgrad_small_b", lambda a, b: a.T @ b,
     lambda r: (f32(r, 4096, 384), f32(r, 4096, 64)), 5e-3),
    ("dot_wgmma_wgrad_edges", lambda a, b: a.T @ b,
     lambda r: (f32(r, 300, 200), f32(r, 300, 40)), 5e-3),
    # A M-major and B K-major: the register form, no copy
    ("dot_wgmma_tt", lambda a, b: a.T @ b.T, lambda r: (f32(r, 160, 96), f32(r, 72, 160)), 5e-3),
    # 8-bit integers, summed in int32 on the tensor cores (operands not stored K-major copied
    # so first); results exact, narrower results wrapping as the reference's
    ("dot_wgmma_s8", lambda a, b: lax.dot(a, b, preferred_element_type=jnp.int32),
     lambda r: (_i8(r, 200, 96), _i8(r, 96, 130)), 0),
    ("dot_wgmma_u8_nt", lambda a, b: lax.dot_general(a, b, (((1,), (1,)), ((), ())),
                                                     preferred_element_type=jnp.uint32),
     lambda r: (_i8(r, 64, 128, dtype=np.uint8), _i8(r, 72, 128, dtype=np.uint8)), 0),
    ("dot_wgmma_s8_wraps", lambda a, b: a @ b, lambda r: (_i8(r, 64, 256), _i8(r, 256, 64)), 0),
    ("dot_wgmma_s8_batched_tn",
     lambda a, b: jnp.einsum("bkm,bkn->bmn", a, b, preferred_element_type=jnp.int32),
     lambda r: (_i8(r, 3, 64, 48), _i8(r, 3, 64, 80)), 0),
    ("dot_wgmma_s8_dequant", lambda a, b, s: lax.dot(
        a, b, preferred_element_type=jnp.int32).astype(jnp.float32) * s[None, :],
     lambda r: (_i8(r, 128, 512), _i8(r, 512, 96), f32(r, 96)), 1e-6),
    # integer dots the tensor cores do not take: a tiled SIMT kernel, not a sum per element
    ("dot_int32_simt", lambda a, b: a @ b,
     lambda r: (r.integers(-99, 99, (50, 40), dtype=np.int32),
                r.integers(-99, 99, (40, 30), dtype=np.int32)), 0),
    ("dot_s8_odd_k_simt", lambda a, b: lax.dot(a, b, preferred_element_type=jnp.int32),
     lambda r: (_i8(r, 70, 50), _i8(r, 50, 40)), 0),
]
CASES += WGMMA_CASES

E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2


def _f8(rng, dtype, *shape, scale=2.0):
  """Random 8-bit floats, about ``scale`` in size, rounded as ml_dtypes casts."""
  return (rng.standard_normal(shape) * scale).astype(np.float32).astype(dtype)


def _special_narrow(r, n, dtype=np.float32):
  """Values every convert to float8 must get right: overflow past each type's largest value
  (NaN for e4m3fn, infinity for e5m2), both sides of the rounding thresholds (464, 61440),
  subnormals, ties, infinities, NaN, signed zeros, and a spread of ordinary values."""
  fixed = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 448, 460, 464, 465, -470, 480, 1e5,
                    57344, 61439, 61440, 61441, -7e4, 2.0 ** -9, 2.0 ** -10, 3 * 2.0 ** -11,
                    2.0 ** -16, 2.0 ** -17, 3 * 2.0 ** -18, 1.0625, 1.1875, -1.0625, 1e-30,
                    2.0 ** -7 * 1.9375, 2.0 ** -6 * 0.96875], np.float64)
  rest = r.standard_normal(n - fixed.size) * 2.0 ** r.integers(-18, 17, n - fixed.size)
  with np.errstate(over="ignore"):
    return np.concatenate([fixed, rest]).astype(dtype)


def _quant(x, scale, dtype):
  return (x / scale).astype(dtype)


def _fp8_linear(x, w, sx, sw):
  """Quantize, multiply on the tensor cores, dequantize: one device program."""
  xq = _quant(x, sx, E4M3)
  wq = _quant(w, sw, E4M3)
  return lax.dot(xq, wq, preferred_element_type=jnp.float32) * (sx * sw)


# 8-bit floats (float8_e4m3fn, float8_e5m2): converts from and to f32/bf16/f16 rounded as
# ml_dtypes (NaN for e4m3fn overflow, infinity for e5m2's), arithmetic in f32 rounded per op
# (exact against the reference), and dots on the tensor cores (wgmma k32 .e4m3/.e5m2, f32
# accumulators; operands not stored K-major copied so first; odd sizes, batches, mixed types,
# f32/bf16/f16/float8 results).  Products of 8-bit floats are exact in f32; the tolerances
# allow for the order of the sums, for the tensor cores' float8 accumulation (Hopper's keeps
# fewer bits than f32 between instructions: 2e-3 norm-relative, where a wrong layout or
# operand type is off by O(1)) and for one rounding of a 16- or 8-bit result
FP8_CASES = [
    ("fp8_convert_f32", lambda x: (x.astype(E4M3), x.astype(E5M2),
                                   x.astype(E4M3).astype(jnp.float32),
                                   x.astype(E5M2).astype(jnp.float32)),
     lambda r: (_special_narrow(r, 3001),), 0),
    ("fp8_convert_16bit", lambda x, y: (x.astype(E4M3), x.astype(E5M2), y.astype(E4M3),
                                        y.astype(E5M2)),
     lambda r: (_special_narrow(r, 1000, BF16), _special_narrow(r, 1000, np.float16)), 0),
    ("fp8_convert_back", lambda a, b: (a.astype(BF16), a.astype(np.float16), b.astype(BF16),
                                       b.astype(np.float16), a.astype(E5M2), b.astype(E4M3),
                                       a.astype(jnp.int32), b.astype(jnp.int8)),
     lambda r: (np.arange(256, dtype=np.uint8).view(E4M3),
                np.arange(256, dtype=np.uint8).view(E5M2)), 0),
    ("fp8_arith", lambda a, b: (a * b + a, jnp.maximum(a, b) - b, (a / 3).astype(jnp.float32)),
     lambda r: (_f8(r, E4M3, 40, 77), _f8(r, E4M3, 40, 77)), 0),
    # moved, not computed: exact (a sort's order, a transpose, a gather, a bitcast, a pool's
    # maximum from e4m3fn's lowest value)
    ("fp8_moves", lambda a, b, i: (jnp.sort(a, axis=1), b.T, a[i],
                                   lax.bitcast_convert_type(b, jnp.uint8),
                                   lax.reduce_window(a, np.array(-448, E4M3), lax.max, (2, 3),
                                                     (2, 2), "VALID")),
     lambda r: (_f8(r, E4M3, 33, 70), _f8(r, E5M2, 45, 66), r.integers(0, 33, 50,
                                                                         dtype=np.int32)), 0),
    ("fp8_reduce", lambda a, b: (jnp.max(a, axis=1), jnp.min(b, axis=0),
                                 jnp.sum(b.astype(jnp.float32), axis=1)),
     lambda r: (_f8(r, E4M3, 64, 300), _f8(r, E5M2, 64, 300)), 1e-6),
    ("dot_wgmma_e4m3_nt", lambda a, b: lax.dot_general(a, b, (((1,), (1,)), ((), ())),
                                                       preferred_element_type=jnp.float32),
     lambda r: (_f8(r, E4M3, 200, 96), _f8(r, E4M3, 130, 96)), 2e-3),
    ("dot_wgmma_e5m2", lambda a, b: lax.dot(a, b, preferred_element_type=jnp.float32),
     lambda r: (_f8(r, E5M2, 256, 256), _f8(r, E5M2, 256, 512)), 2e-3),
    ("dot_wgmma_e4m3_e5m2_bf16", lambda a, b: lax.dot(a, b, preferred_element_type=jnp.bfloat16),
     lambda r: (_f8(r, E4M3, 70, 160), _f8(r, E5M2, 160, 45)), 1e-2),
    ("dot_wgmma_e5m2_e4m3_tn_f16", lambda a, b: lax.dot_general(
        a, b, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float16),
     lambda r: (_f8(r, E5M2, 128, 100, scale=0.5), _f8(r, E4M3, 128, 72, scale=0.5)), 1e-2),
    ("dot_wgmma_e4m3_batched", lambda a, b: jnp.einsum(
        "bqk,bkn->bqn", a, b, preferred_element_type=jnp.float32),
     lambda r: (_f8(r, E4M3, 3, 65, 48), _f8(r, E4M3, 3, 48, 33)), 2e-3),
    ("dot_wgmma_e4m3_out", lambda a, b: a @ b.T,
     lambda r: (_f8(r, E4M3, 64, 128, scale=0.25), _f8(r, E4M3, 80, 128, scale=0.25)), 5e-2),
    # few output tiles, a long contraction: split along k into f32 partial products
    ("dot_wgmma_e4m3_split_k", lambda a, b: lax.dot_general(
        a, b, (((1,), (1,)), ((), ())), preferred_element_type=jnp.bfloat16),
     lambda r: (_f8(r, E4M3, 64, 8192, scale=0.5), _f8(r, E5M2, 96, 8192, scale=0.5)), 1e-2),
    ("dot_wgmma_fp8_linear", _fp8_linear,
     lambda r: (f32(r, 300, 256), f32(r, 256, 200), np.float32(2.0 / 448),
                np.float32(2.0 / 448)), 2e-3),
    # k not a multiple of 16 bytes: the tiled SIMT kernel, loading float8 as f32
    ("dot_fp8_odd_k_simt", lambda a, b: lax.dot(a, b, preferred_element_type=jnp.float32),
     lambda r: (_f8(r, E4M3, 70, 50), _f8(r, E5M2, 50, 40)), 1e-5),
]
CASES += FP8_CASES


def _conv(x, w, strides=(1, 1), padding="SAME", dil=None, dn=("NHWC", "HWIO", "NHWC"),
          groups=1):
  return lax.conv_general_dilated(x, w, strides, padding, rhs_dilation=dil,
                                  dimension_numbers=dn, feature_group_count=groups)


# Convolutions as implicit GEMMs (implicit_gemm.py): WgmmaDot reads the patch matrix in place
# from the input (or from one kernel writing a prologue's value); every padding, stride and
# dilation, 1-D, bf16, and an input gradient (a convolution of the output gradient)
IMPLICIT_GEMM_CASES = [
    ("conv_implicit_prologue", lambda x, w, s, b: _conv(jnp.maximum(x * s + b, 0.0), w),
     lambda r: (f32(r, 4, 10, 12, 16), f32(r, 3, 3, 16, 32), f32(r, 16), f32(r, 16)), 5e-3),
    ("conv_implicit_strided", lambda x, w: _conv(x, w, (2, 2), "VALID", (2, 1)),
     lambda r: (f32(r, 2, 15, 17, 8), f32(r, 3, 3, 8, 24)), 5e-3),
    ("conv_implicit_padding", lambda x, w: _conv(x, w, (1, 2), ((2, 0), (1, 3))),
     lambda r: (f32(r, 3, 9, 11, 12), f32(r, 3, 4, 12, 20)), 5e-3),
    ("conv_implicit_bf16", lambda x, w: _conv(x, w),
     lambda r: (f32(r, 2, 9, 9, 16).astype(BF16), f32(r, 3, 3, 16, 64).astype(BF16)), 2e-2),
    ("conv_implicit_1d", lambda x, w: _conv(x, w, (1,), ((2, 1),), dn=("NWC", "WIO", "NWC")),
     lambda r: (f32(r, 3, 40, 8), f32(r, 5, 8, 12)), 5e-3),
    ("conv_implicit_input_grad", ourjax.grad(lambda x, w: jnp.sum(jnp.tanh(_conv(x, w)))),
     lambda r: (f32(r, 2, 12, 12, 16), f32(r, 3, 3, 16, 32, lo=-0.3, hi=0.3)), 5e-3),
    # weight gradients of batches too small to fill a 16-byte copy (bfloat16: 8, f32: 4): the
    # batch (the gradient's channels) zero-padded, the output gradient's too, and the patches
    # read in place
    ("conv_implicit_weight_grad_bf16_batch4", ourjax.grad(
        lambda w, x: jnp.sum(jnp.tanh(_conv(x, w).astype(jnp.float32)))),
     lambda r: (f32(r, 3, 3, 32, 32, lo=-0.3, hi=0.3).astype(BF16),
                f32(r, 4, 12, 12, 32).astype(BF16)), 3e-2),
    ("conv_implicit_weight_grad_f32_batch2", ourjax.grad(
        lambda w, x: jnp.sum(jnp.tanh(_conv(x, w, (2, 2))))),
     lambda r: (f32(r, 3, 3, 16, 32, lo=-0.3, hi=0.3), f32(r, 2, 13, 13, 16)), 5e-3),
    # three channels (an image's): zero-padded to four for whole 16-byte copies, weights too
    ("conv_implicit_rgb", lambda x, w, s: jnp.maximum(_conv(x, w, (2, 2)) * s, 0.0),
     lambda r: (f32(r, 2, 17, 15, 3), f32(r, 3, 3, 3, 32), f32(r, 32)), 5e-3),
    # a residual block: the first convolution's scale, shift and relu in its epilogue, the
    # second convolution's patches read in place from its stored result
    ("conv_implicit_block", lambda x, w1, w2, s, b: jnp.maximum(
        _conv(jnp.maximum(_conv(x, w1) * s + b, 0.0), w2) * s - b + x, 0.0),
     lambda r: (f32(r, 2, 10, 10, 16), f32(r, 3, 3, 16, 16, lo=-0.3, hi=0.3),
                f32(r, 3, 3, 16, 16, lo=-0.3, hi=0.3), f32(r, 16), f32(r, 16)), 5e-3),
]
CASES += IMPLICIT_GEMM_CASES

# Input gradients of strided convolutions (lhs dilation) and a transposed convolution: one
# undilated convolution per output phase (conv_to_dot._split_phases), each an implicit GEMM
# of the kernel positions that meet input elements, interleaved; odd sizes (phases of unequal
# length), a 1x1 kernel (three of four phases zeros), bf16, feature groups, NCHW with a
# stride along one dimension and rhs dilation, both gradients
STRIDED_GRAD_CASES = [
    ("conv_strided_input_grad", ourjax.grad(
        lambda x, w: jnp.sum(jnp.tanh(_conv(x, w, (2, 2))))),
     lambda r: (f32(r, 2, 15, 16, 32), f32(r, 3, 3, 32, 48, lo=-0.3, hi=0.3)), 5e-3),
    ("conv_strided_1x1_input_grad", ourjax.grad(
        lambda x, w: jnp.sum(jnp.tanh(_conv(x, w, (2, 2))))),
     lambda r: (f32(r, 2, 16, 16, 32), f32(r, 1, 1, 32, 64, lo=-0.3, hi=0.3)), 5e-3),
    ("conv_strided_input_grad_bf16", ourjax.grad(
        lambda x, w: jnp.sum(jnp.tanh(_conv(x, w, (2, 2)).astype(jnp.float32)))),
     lambda r: (f32(r, 4, 14, 14, 32).astype(BF16),
                f32(r, 3, 3, 32, 64, lo=-0.3, hi=0.3).astype(BF16)), 3e-2),
    ("conv_strided_grouped_input_grad", ourjax.grad(
        lambda x, w: jnp.sum(jnp.tanh(_conv(x, w, (2, 2), groups=4)))),
     lambda r: (f32(r, 4, 13, 13, 64), f32(r, 3, 3, 16, 64, lo=-0.3, hi=0.3)), 5e-3),
    ("conv_strided_nchw_grads", ourjax.grad(
        lambda x, w: jnp.sum(jnp.tanh(_conv(x, w, (2, 1), ((1, 2), (2, 1)), (2, 1),
                                            dn=("NCHW", "OIHW", "NCHW")))), argnums=(0, 1)),
     lambda r: (f32(r, 2, 16, 17, 12), f32(r, 32, 16, 3, 3, lo=-0.3, hi=0.3)), 5e-3),
    ("conv_transpose_strided", lambda x, w: lax.conv_transpose(
        x, w, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")),
     lambda r: (f32(r, 2, 9, 9, 32), f32(r, 4, 4, 32, 24, lo=-0.3, hi=0.3)), 5e-3),
]
CASES += STRIDED_GRAD_CASES

# Convolutions whose weights are a small fraction of their patch matrix (dots.narrow_b_form):
# the weights copied K-major, then the shared-memory form -- transposed (``ss_t``: 128 output
# channels by 256 positions) or not (``ss``: 256 channels wide) -- with the epilogue evaluated
# after the tile went through shared memory (``late_epilogue``), stored into the [N, H, W, C]
# result; odd channel and position counts at every edge, a bf16 result (16-byte chunks of 8),
# and a plain dot of that shape
NARROW_B_CASES = [
    ("conv_narrow_b_ss_t", lambda x, w, s, b: jnp.maximum(_conv(x, w) * s + b, 0.0),
     lambda r: (f32(r, 16, 16, 16, 32), f32(r, 3, 3, 32, 128, lo=-0.3, hi=0.3), f32(r, 128),
                f32(r, 128)), 5e-3),
    ("conv_narrow_b_ss_t_edges", lambda x, w, s: jnp.tanh(_conv(x, w) * s),
     lambda r: (f32(r, 7, 7, 49, 8), f32(r, 3, 3, 8, 72, lo=-0.3, hi=0.3), f32(r, 72)), 5e-3),
    ("conv_narrow_b_ss_bf16", lambda x, w, s: jnp.maximum(_conv(x, w) * s, 0.0).astype(BF16),
     lambda r: (f32(r, 32, 16, 16, 16), f32(r, 3, 3, 16, 256, lo=-0.3, hi=0.3), f32(r, 256)),
     1e-2),
    ("dot_narrow_b_ss_t", lambda a, b, c: jnp.tanh(a @ b + c),
     lambda r: (f32(r, 4096, 96), f32(r, 96, 96, lo=-0.3, hi=0.3), f32(r, 96)), 5e-3),
]
CASES += NARROW_B_CASES

# Grouped convolutions: feature groups become one product batched over the groups, its
# patches read in place by one WgmmaDot with the group as a grid dimension and its result
# stored straight into the output's feature order (conv_to_dot._rewrite_grouped); the weight
# gradient (batch groups) is split per group where each group's product is past a GPU
# kernel's fixed cost.  Forward with an epilogue, the input gradient, the weight gradient,
# narrow groups (32 of 8 channels), bf16, strides, NCHW (the result's transpose not folded),
# 1-D
GROUPED_CONV_CASES = [
    ("conv_grouped_narrow", lambda x, w: _conv(x, w, groups=32),
     lambda r: (f32(r, 4, 14, 14, 256), f32(r, 3, 3, 8, 256, lo=-0.3, hi=0.3)), 5e-3),
    ("conv_grouped_narrow_grads", ourjax.grad(
        lambda x, w: jnp.sum(jnp.tanh(_conv(x, w, groups=32))), argnums=(0, 1)),
     lambda r: (f32(r, 8, 14, 14, 256), f32(r, 3, 3, 8, 256, lo=-0.3, hi=0.3)), 5e-3),
    ("conv_grouped_bf16_grads", ourjax.grad(
        lambda x, w: jnp.sum(jnp.tanh(_conv(x, w, groups=4).astype(jnp.float32))),
        argnums=(0, 1)),
     lambda r: (f32(r, 8, 10, 10, 64).astype(BF16),
                f32(r, 3, 3, 16, 64, lo=-0.3, hi=0.3).astype(BF16)), 3e-2),
    ("conv_grouped_bf16", lambda x, w: _conv(x, w, groups=8),
     lambda r: (f32(r, 4, 10, 10, 128).astype(BF16),
                f32(r, 3, 3, 16, 128, lo=-0.3, hi=0.3).astype(BF16)), 2e-2),
    ("conv_grouped_strided", lambda x, w: _conv(x, w, (2, 2), groups=4),
     lambda r: (f32(r, 3, 13, 11, 64), f32(r, 3, 3, 16, 96, lo=-0.3, hi=0.3)), 5e-3),
    ("conv_grouped_nchw", lambda x, w: _conv(x, w, dn=("NCHW", "OIHW", "NCHW"), groups=4),
     lambda r: (f32(r, 2, 64, 9, 9), f32(r, 64, 16, 3, 3, lo=-0.3, hi=0.3)), 5e-3),
    ("conv_grouped_1d", lambda x, w: _conv(x, w, (1,), ((2, 1),), dn=("NWC", "WIO", "NWC"),
                                           groups=2),
     lambda r: (f32(r, 3, 40, 16), f32(r, 5, 8, 24)), 5e-3),
    ("conv_grouped", lambda x, w, s: jnp.maximum(_conv(x, w, groups=2) * s, 0.0),
     lambda r: (f32(r, 8, 28, 28, 64), f32(r, 3, 3, 32, 64, lo=-0.3, hi=0.3), f32(r, 64)), 5e-3),
    # a scale, shift and relu in the dot's epilogue, before its result's swap into the output's
    # feature order, which the dot's store does (simplify_sinks.sink_group_transpose)
    ("conv_grouped_scale_shift_relu_bf16", lambda x, w, s, b: jnp.maximum(
        _conv(x, w, (2, 2), groups=4).astype(jnp.float32) * s + b, 0.0).astype(BF16),
     lambda r: (f32(r, 4, 15, 15, 64).astype(BF16),
                f32(r, 3, 3, 16, 96, lo=-0.3, hi=0.3).astype(BF16), f32(r, 96), f32(r, 96)),
     2e-2),
    ("conv_grouped_relu_1d", lambda x, w, s: jnp.maximum(
        _conv(x, w, (1,), ((2, 1),), dn=("NWC", "WIO", "NWC"), groups=2) * s, 0.0),
     lambda r: (f32(r, 3, 40, 16), f32(r, 5, 8, 24), f32(r, 24)), 5e-3),
    ("conv_grouped_input_grad", ourjax.grad(
        lambda x, w: jnp.sum(jnp.tanh(_conv(x, w, groups=4)))),
     lambda r: (f32(r, 8, 28, 28, 128), f32(r, 3, 3, 32, 128, lo=-0.3, hi=0.3)), 5e-3),
    ("conv_grouped_weight_grad", ourjax.grad(
        lambda w, x: jnp.sum(jnp.tanh(_conv(x, w, groups=2))), argnums=0),
     lambda r: (f32(r, 3, 3, 32, 64, lo=-0.3, hi=0.3), f32(r, 8, 28, 28, 64)), 5e-3),
]
CASES += GROUPED_CONV_CASES

# Depthwise convolutions (one channel a group): the forward and input gradient direct, the
# weight gradient (batch groups of one element and one output feature) as one multi-output
# reduction of products of the input's windows and the output gradient
# (conv_to_dot._rewrite_as_reductions); a channel multiplier of 2, strides, dilation, bf16
DEPTHWISE_CASES = [
    ("conv_depthwise_grads", ourjax.grad(
        lambda x, w: jnp.sum(jnp.tanh(_conv(x, w, groups=64))), argnums=(0, 1)),
     lambda r: (f32(r, 8, 14, 14, 64), f32(r, 3, 3, 1, 64, lo=-0.3, hi=0.3)), 5e-3),
    ("conv_depthwise_mult2_strided_weight_grad", ourjax.grad(
        lambda w, x: jnp.sum(jnp.tanh(_conv(x, w, (2, 2), ((1, 0), (2, 1)), (1, 2),
                                            groups=32))), argnums=0),
     lambda r: (f32(r, 3, 3, 1, 64, lo=-0.3, hi=0.3), f32(r, 4, 17, 15, 32)), 5e-3),
    ("conv_depthwise_bf16_weight_grad", ourjax.grad(
        lambda w, x: jnp.sum(jnp.tanh(_conv(x, w, groups=32).astype(jnp.float32))), argnums=0),
     lambda r: (f32(r, 5, 5, 1, 32, lo=-0.3, hi=0.3).astype(BF16),
                f32(r, 4, 12, 12, 32).astype(BF16)), 3e-2),
]
CASES += DEPTHWISE_CASES

# (run with conv_to_dot.MAX_PATCH_BYTES lowered, so that it is cut into batch chunks)
CHUNKED_CONV = ("conv_implicit_chunks", lambda x, w, s: jnp.maximum(_conv(x, w) * s, 0.0),
                lambda r: (f32(r, 4, 8, 8, 16), f32(r, 3, 3, 16, 24), f32(r, 24)), 5e-3)

CASE_NAMES = [c[0] for c in CASES]
