"""lax behaviours that JAX's own lax_test exercises and ourjax got wrong, each checked against
NumPy (bit patterns, float64 references) or JAX's documented semantics."""
import ml_dtypes
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import lax


def _np_broadcast_in_dim(x, shape, dims):
  xt = np.transpose(x, np.argsort(dims))
  expanded = [1] * len(shape)
  for i, d in enumerate(sorted(dims)):
    expanded[d] = xt.shape[i]
  return np.broadcast_to(xt.reshape(expanded), shape)


@pytest.mark.parametrize("xshape,shape,dims", [
    ((3, 1), (2, 3, 4), (1, 0)), ((3, 1, 5), (1, 4, 3, 5), (2, 0, 3)),
    ((3, 1, 5), (5, 4, 1, 3), (3, 1, 0)), ((2, 3), (3, 2), (1, 0))])
def test_broadcast_in_dim_takes_the_operand_dimensions_in_any_order(xshape, shape, dims):
  rng = np.random.RandomState(0)
  x = rng.randn(*xshape).astype(np.float32)
  want = _np_broadcast_in_dim(x, shape, dims)
  f = lambda x: lax.broadcast_in_dim(x, shape, dims)
  np.testing.assert_array_equal(f(x), want)
  np.testing.assert_array_equal(ourjax.jit(f)(x), want)
  np.testing.assert_array_equal(ourjax.vmap(f)(np.stack([x, 2 * x])), np.stack([want, 2 * want]))
  # the cotangent sums over the broadcast dimensions, back in the operand's order
  w = rng.randn(*shape).astype(np.float32)
  g = ourjax.grad(lambda x: jnp.sum(f(x) * w))(x)
  eye = np.eye(x.size, dtype=np.float32).reshape((x.size,) + x.shape)
  expect = np.array([np.sum(_np_broadcast_in_dim(e, shape, dims) * w) for e in eye])
  np.testing.assert_allclose(g, expect.reshape(x.shape), rtol=1e-5)
  with pytest.raises(TypeError, match="must not contain duplicates"):
    lax.broadcast_in_dim(x, shape, (dims[0],) * len(dims))


@pytest.mark.parametrize("op", [
    lambda x: lax.squeeze(x, ()), lambda x: lax.reshape(x, np.shape(x)),
    lambda x: lax.expand_dims(x, ()), lambda x: lax.rev(x, ()),
    lambda x: lax.transpose(x, tuple(range(np.ndim(x)))),
    lambda x: lax.convert_element_type(x, np.result_type(x)),
    lambda x: lax.broadcast_in_dim(x, np.shape(x), tuple(range(np.ndim(x))))])
@pytest.mark.parametrize("value", [np.float32(2.0), np.arange(3, dtype=np.int32), 2.0])
def test_lax_operations_with_nothing_to_do_still_return_an_array(op, value):
  for fn in (op, ourjax.jit(op)):
    out = fn(value)
    assert isinstance(out, ourjax.Array)
    np.testing.assert_array_equal(out, value)
  assert lax.squeeze(2.0, ()).weak_type and not lax.squeeze(np.float32(2), ()).weak_type


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_lax_conj_of_a_real_array_is_complex(dtype):
  x = np.array([1.5, -2.0, 0.0], dtype)
  for fn in (lax.conj, ourjax.jit(lax.conj)):
    out = fn(x)
    assert out.dtype == np.complex64
    np.testing.assert_array_equal(out, np.conj(x.astype(np.complex64)))
  g = ourjax.grad(lambda x: jnp.sum(lax.conj(x).real * np.arange(3.0, dtype=np.float32)))
  np.testing.assert_array_equal(g(np.ones(3, np.float32)), np.arange(3.0))
  assert lax.conj(2.0).weak_type and lax.conj(2.0).dtype == np.complex64
  for bad in (np.float16, np.int32):
    with pytest.raises(TypeError, match=f"conj does not accept dtype {np.dtype(bad).name}"):
      lax.conj(np.ones(2, bad))
  assert jnp.conj(np.ones(2, np.float32)).dtype == np.float32     # (jnp keeps real types real)


def _bits(x, width):
  """The elements' bit patterns as Python ints (sub-byte types: their low bits)."""
  raw = x.view(np.uint8) if width < 8 else x.view(f"u{width // 8}")
  return [int(v) & ((1 << width) - 1) for v in raw.reshape(-1)]


@pytest.mark.parametrize("src,dst,shape", [
    (np.float32, ml_dtypes.uint4, ()), (np.float32, ml_dtypes.int4, (3,)),
    (ml_dtypes.int4, np.int8, (2, 4, 2)), (ml_dtypes.int4, np.float16, (4,)),
    (ml_dtypes.uint4, np.float32, (2, 8)), (np.int16, ml_dtypes.uint2, (3,)),
    (ml_dtypes.int4, ml_dtypes.float4_e2m1fn, (5,)), (np.int32, np.float32, (3,))])
def test_bitcast_convert_type_counts_sub_byte_bits(src, dst, shape):
  rng = np.random.RandomState(0)
  info = ml_dtypes.iinfo(np.dtype(src)) if np.dtype(src).kind in "iuV" and \
      src is not np.float32 else None
  x = np.asarray(rng.randint(int(info.min), int(info.max) + 1, shape) if info is not None else
                 rng.randn(*shape)).astype(src)
  sw = ml_dtypes.iinfo(src).bits if src in (ml_dtypes.int4, ml_dtypes.uint4) else \
      8 * np.dtype(src).itemsize
  dw = {ml_dtypes.uint4: 4, ml_dtypes.int4: 4, ml_dtypes.uint2: 2,
        ml_dtypes.float4_e2m1fn: 4}.get(dst, 8 * np.dtype(dst).itemsize)
  # the reference: the little-endian bit string regrouped
  src_bits = _bits(x, sw)
  stream = "".join(format(b, f"0{sw}b")[::-1] for b in src_bits)     # low bits first
  want = [int(stream[i:i + dw][::-1], 2) for i in range(0, len(stream), dw)]
  for fn in (lambda v: lax.bitcast_convert_type(v, dst),
             ourjax.jit(lambda v: lax.bitcast_convert_type(v, dst))):
    out = np.asarray(fn(x))
    expect_shape = shape + (sw // dw,) if sw > dw else shape[:-1] if sw < dw else shape
    assert out.shape == expect_shape and out.dtype == np.dtype(dst)
    assert _bits(out, dw) == want


@pytest.mark.parametrize("dst", [ml_dtypes.int4, ml_dtypes.uint4])
def test_complex128_views_as_4_bit_types_through_its_bytes(x64, dst):
  # 128 bits has no unsigned integer type: the bytes, each low nibble first (JAX's view)
  x = (np.arange(6) * 1.37 - 2 + 1j * (np.arange(6) ** 2 - 3.1)).astype(np.complex128)
  x = x.reshape(2, 3)
  nibbles = [(b >> s) & 15 for b in x.view(np.uint8).reshape(-1).tolist() for s in (0, 4)]
  for view in (lambda v: jnp.asarray(v).view(dst), ourjax.jit(lambda v: v.view(dst))):
    out = view(x)
    assert out.shape == (2, 96) and out.dtype == np.dtype(dst)
    assert _bits(np.asarray(out), 4) == nibbles
    np.testing.assert_array_equal(np.asarray(out.view(np.complex128)), x)
    np.testing.assert_array_equal(np.asarray(ourjax.jit(lambda v: v.view(np.complex128))(out)),
                                  x)


def test_bitcast_convert_type_refuses_bool_and_complex_as_jax():
  for x, dst in [(np.ones(2, np.complex64), np.float32), (np.ones(2, np.complex64), np.int32),
                 (np.ones(2, np.bool_), np.int8), (np.ones(2, np.int8), np.bool_)]:
    with pytest.raises(TypeError, match="does not support bool or complex values unless the "
                                        "operand and destination types match"):
      lax.bitcast_convert_type(x, dst)
    assert jnp.asarray(x).view(dst).dtype == dst      # (Array.view does reinterpret them)
  assert lax.bitcast_convert_type(np.ones(2, np.complex64), np.complex64).dtype == np.complex64


@pytest.mark.parametrize("dtype", [ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2])
@pytest.mark.parametrize("name", ["div", "rem"])
def test_sub_byte_integer_division_wraps_as_the_narrow_type(dtype, name):
  info = ml_dtypes.iinfo(dtype)
  vals = np.arange(int(info.min), int(info.max) + 1)
  xs, ys = [v.ravel() for v in np.meshgrid(vals, vals)]
  ys_safe = np.where(ys == 0, 1, ys)
  q = np.trunc(xs / ys_safe).astype(np.int64)                   # C division, then XLA's x / 0
  want = q if name == "div" else xs - q * ys_safe
  if name == "div":
    want = np.where(ys == 0, -1 if info.min < 0 else int(info.max), want)
  else:
    want = np.where(ys == 0, xs, want)
  span = 1 << info.bits                                           # wrap: INT_MIN / -1
  want = (want - int(info.min)) % span + int(info.min)
  fns = [getattr(lax, name)] + ([ourjax.jit(getattr(lax, name))] if info.bits == 4 else [])
  for fn in fns:      # (int2 has no compiled form)
    out = fn(xs.astype(dtype), ys.astype(dtype))
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(np.asarray(out).astype(np.int64), want)
