"""Typed PRNG key arrays (``random.key``): the typed path agrees with the raw ``uint32`` key
path bit for bit, key arrays behave as arrays of keys under indexing, structural operations and
transformations (checked against the same operation on the key data in NumPy), and misuse
raises JAX's errors.  The rbg implementations are cross-checked against threefry on each half
of their key data (JAX's construction)."""
import warnings

import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import lax, tree_util
from ourjax import random as jr


def data(k):
  return np.asarray(jr.key_data(k))


def keys(n, seed=28):
  return ourjax.vmap(jr.key)(seed + jnp.arange(n, dtype=jnp.uint32))


@pytest.mark.parametrize("seed", [0, 1, 1701, -1, 2 ** 31 + 3])
def test_key_is_typed_prngkey_data(seed):
  k = jr.key(seed)
  assert k.shape == () and k.ndim == 0 and k.size == 1
  assert str(k.dtype) == "key<fry>" and k.dtype == jr.key_dtype("threefry2x32")
  assert k.itemsize == k.dtype.itemsize == 8 and k.nbytes == 8
  np.testing.assert_array_equal(data(k), np.asarray(jr.PRNGKey(seed)))
  assert jnp.issubdtype(k.dtype, ourjax.dtypes.prng_key)
  assert jnp.issubdtype(k.dtype, ourjax.dtypes.extended)
  assert not jnp.issubdtype(k.dtype, np.integer)
  assert not jnp.issubdtype(np.uint32, ourjax.dtypes.prng_key)
  assert isinstance(k, ourjax.Array)


def test_typed_and_raw_paths_agree():
  raw, typed = jr.PRNGKey(1701), jr.key(1701)
  np.testing.assert_array_equal(data(jr.split(typed, 3)), np.asarray(jr.split(raw, 3)))
  np.testing.assert_array_equal(data(jr.split(typed, (2, 2))), np.asarray(jr.split(raw, (2, 2))))
  np.testing.assert_array_equal(data(jr.fold_in(typed, 9)), np.asarray(jr.fold_in(raw, 9)))
  for f in (lambda k: jr.bits(k, (5,)), lambda k: jr.uniform(k, (5,)),
            lambda k: jr.normal(k, (2, 3)), lambda k: jr.randint(k, (4,), 0, 9),
            lambda k: jr.permutation(k, 6), lambda k: jr.gamma(k, 2.0, (3,)),
            lambda k: jr.choice(k, 10, (3,), replace=False)):
    np.testing.assert_array_equal(np.asarray(f(typed)), np.asarray(f(raw)))
  assert jr.split(typed).dtype == typed.dtype          # typed in, typed out
  assert jr.split(raw).dtype == np.uint32              # raw in, raw out


def test_keys_through_transformations():
  ks = jr.split(jr.key(0), 4)
  want = np.stack([np.asarray(jr.uniform(ks[i], (2,))) for i in range(4)])
  np.testing.assert_array_equal(np.asarray(ourjax.vmap(lambda k: jr.uniform(k, (2,)))(ks)), want)
  np.testing.assert_array_equal(
      np.asarray(ourjax.jit(ourjax.vmap(lambda k: jr.uniform(k, (2,))))(ks)), want)
  out = ourjax.jit(lambda k: jr.split(k, 3))(ks[0])
  assert out.dtype == ks.dtype and out.shape == (3,)
  np.testing.assert_array_equal(data(out), data(jr.split(ks[0], 3)))
  _, ys = lax.scan(lambda c, k: (c, jr.uniform(k, (2,))), 0., ks)
  np.testing.assert_array_equal(np.asarray(ys), want)
  _, kout = lax.scan(lambda c, k: (c, k), 0., ks)       # keys come back out as keys
  assert kout.dtype == ks.dtype and kout.shape == (4,)
  n, k = lax.while_loop(lambda s: s[0] < 3, lambda s: (s[0] + 1, jr.split(s[1])[0]), (0, ks[0]))
  expect = ks[0]
  for _ in range(3):
    expect = jr.split(expect)[0]
  np.testing.assert_array_equal(data(k), data(expect))
  c = lax.cond(True, lambda k: jr.fold_in(k, 1), lambda k: k, ks[1])
  np.testing.assert_array_equal(data(c), data(jr.fold_in(ks[1], 1)))
  g = ourjax.grad(lambda x, k: x * jr.normal(k))(2.0, ks[2])
  np.testing.assert_allclose(float(g), float(jr.normal(ks[2])), rtol=1e-6)
  # a negative vmap axis counts from the end of the key array's shape
  k2 = ks.reshape(2, 2)
  by_col = ourjax.vmap(lambda k: jr.key_data(k), in_axes=-1)(k2)
  np.testing.assert_array_equal(np.asarray(by_col), data(k2).transpose(1, 0, 2))
  out = ourjax.vmap(lambda k: k, in_axes=0, out_axes=-1)(k2)
  np.testing.assert_array_equal(data(out), data(k2.T))


def test_structural_operations_match_the_key_data():
  ks = keys(6)
  d = data(ks)
  assert ks.shape == (6,) and d.shape == (6, 2)
  cases = [
      (lambda k: k.reshape(2, 3), d.reshape(2, 3, 2)),
      (lambda k: jnp.reshape(k, (3, 2)).T, d.reshape(3, 2, 2).transpose(1, 0, 2)),
      (lambda k: k[1], d[1]),
      (lambda k: k[1:4], d[1:4]),
      (lambda k: k[np.array([True, False] * 3)], d[[0, 2, 4]]),
      (lambda k: k[np.array([5, 0])], d[[5, 0]]),
      (lambda k: k[None, 2:], d[None, 2:]),
      (lambda k: k.at[2].set(k[0]), np.concatenate([d[:2], d[:1], d[3:]])),
      (lambda k: jnp.concatenate([k, k[:2]]), np.concatenate([d, d[:2]])),
      (lambda k: jnp.stack([k, k], axis=1), np.stack([d, d], axis=1)),
      (lambda k: jnp.broadcast_to(k[0], (3,)), np.broadcast_to(d[0], (3, 2))),
      (lambda k: jnp.expand_dims(k, 0), d[None]),
      (lambda k: jnp.where(jnp.arange(6) % 2 == 0, k, k[0]),
       np.where((np.arange(6) % 2 == 0)[:, None], d, d[0])),
      (lambda k: lax.select(jnp.arange(6) < 3, k, k[::-1]),
       np.where((np.arange(6) < 3)[:, None], d, d[::-1])),
      (lambda k: lax.slice_in_dim(k, 1, 3), d[1:3]),
      (lambda k: lax.dynamic_slice_in_dim(k, np.int16(2), 3), d[2:5]),
      (lambda k: jnp.zeros_like(k), np.zeros_like(d)),
      (lambda k: jnp.full_like(k, 7), np.full_like(d, 7)),
      (lambda k: jnp.full((2,), k[3], dtype=k.dtype), np.stack([d[3], d[3]])),
      (lambda k: jnp.ones((2,), dtype=k.dtype), np.ones((2, 2), np.uint32)),
      (lambda k: jnp.tile(k[0], 2), np.stack([d[0], d[0]])),
      (lambda k: jnp.append(k, k[0]), np.concatenate([d, d[:1]])),
      (lambda k: k.reshape(2, 3).ravel(), d),
      (lambda k: jnp.asarray(k), d),
      (lambda k: k.copy(), d),
  ]
  for i, (f, want) in enumerate(cases):
    for g in (f, ourjax.jit(f)):
      out = g(ks)
      assert out.dtype == ks.dtype, i
      np.testing.assert_array_equal(data(out), want, err_msg=str(i))
      assert out.shape == want.shape[:-1], i


def test_equality_and_indexing_errors():
  k, k2 = jr.key(123), jr.key(456)
  assert bool(k == k) and not bool(k == k2) and bool(k != k2)
  ks = jr.split(k, 5).at[2:4].set(k)
  np.testing.assert_array_equal(np.asarray(k == ks), [False, False, True, True, False])
  np.testing.assert_array_equal(np.asarray(k != ks), [True, True, False, False, True])
  with pytest.raises(IndexError, match="Too many indices"):
    k[0]
  with pytest.raises(TypeError, match="unhashable"):
    hash(k)
  assert len(ks) == 5 and len(list(ks)) == 5


def test_arithmetic_and_conversion_errors():
  k = jr.key(0)
  with pytest.raises(TypeError, match="add does not accept dtypes key<fry>, int32"):
    k + 1
  with pytest.raises(TypeError, match="add does not accept dtypes key<fry>, int32"):
    jnp.add(k, 1)
  with pytest.raises(TypeError, match="add does not accept dtype key<fry>"):
    jnp.add(k, k)
  with pytest.raises(TypeError, match="neg does not accept dtype key<fry>"):
    -k
  with pytest.raises(TypeError, match="neg does not accept dtype key<fry>"):
    jnp.negative(k)
  with pytest.raises(ValueError, match="Cannot convert_element_type from key<fry> to int32"):
    lax.convert_element_type(k, np.int32)
  with pytest.raises(ValueError, match="Cannot convert_element_type from int32 to key<fry>"):
    lax.convert_element_type(np.int32(0), k.dtype)
  with pytest.raises(TypeError, match="cannot be converted to a NumPy array"):
    np.asarray(k)
  with pytest.raises(TypeError, match="scalar seed"):
    jr.key(jr.key(0))
  with pytest.raises(ValueError, match="single key"):
    jr.split(jr.split(k, 2))
  with pytest.raises(TypeError, match="invalid PRNG key data"):
    jr.uniform(jnp.zeros((3,), jnp.uint32))
  with pytest.raises(TypeError, match="unrecognized type"):
    jr.key(0, impl=object())
  with pytest.raises(ValueError, match="unrecognized PRNG implementation"):
    jr.key(0, impl="no such prng")
  assert jnp.result_type(k) == k.dtype


def test_key_arrays_are_leaves_to_users():
  ks = jr.split(jr.key(0), 3)
  assert tree_util.tree_leaves([ks, 1.0])[0] is ks
  assert ourjax.tree.map(lambda x: x.shape, {"k": ks}) == {"k": (3,)}
  leaves, tree = tree_util.tree_flatten((ks,))
  assert leaves == [ks] and tree_util.tree_unflatten(tree, leaves)[0] is ks


def test_eval_shape_and_shape_dtype_struct():
  k = jr.key(1701)
  s = ourjax.ShapeDtypeStruct.like(k)
  assert s.shape == () and s.dtype == k.dtype
  assert ourjax.eval_shape(lambda x: x, s) == s
  out = ourjax.eval_shape(lambda x: jr.split(x, 4), k)
  assert out.shape == (4,) and out.dtype == k.dtype
  out = ourjax.eval_shape(lambda x: jr.bits(x, (5,)), k)
  assert out.shape == (5,) and out.dtype == np.uint32


def test_key_tangents_are_float0():
  seen = []

  @ourjax.custom_jvp
  def f(x, k):
    return x * jr.normal(k)

  @f.defjvp
  def f_jvp(primals, tangents):
    x, k = primals
    seen.append(tangents[1].dtype)
    r = jr.normal(k)
    return x * r, tangents[0] * r

  k = jr.key(5)
  assert float(ourjax.grad(f)(1.0, k)) == float(jr.normal(k))
  assert seen and seen[0] == ourjax.dtypes.float0


@pytest.mark.parametrize("impl", ["rbg", "unsafe_rbg"])
def test_rbg_keys_are_two_threefry_keys(impl):
  k = jr.key(3, impl=impl)
  assert k.shape == () and str(k.dtype) == {"rbg": "key<rbg>", "unsafe_rbg": "key<urbg>"}[impl]
  half = np.asarray(jr.PRNGKey(3))
  np.testing.assert_array_equal(data(k), np.concatenate([half, half]))
  assert jr.PRNGKey(3, impl=impl).shape == (4,)
  d = jnp.asarray(np.array([1, 2, 3, 4], np.uint32))
  kk = jr.wrap_key_data(d, impl=impl)
  a, b = d[:2], d[2:]
  np.testing.assert_array_equal(
      data(jr.split(kk, 3)), np.concatenate([np.asarray(jr.split(a, 3)),
                                            np.asarray(jr.split(b, 3))], axis=1))
  np.testing.assert_array_equal(
      data(jr.fold_in(kk, 7)), np.concatenate([np.asarray(jr.fold_in(a, 7)),
                                              np.asarray(jr.fold_in(b, 7))]))
  assert jr.key_impl(kk) == impl and kk.dtype == jr.key_dtype(impl) != jr.key_dtype()
  u = np.asarray(jr.uniform(kk, (1000,)))
  assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.05
  np.testing.assert_array_equal(u, np.asarray(ourjax.jit(lambda k: jr.uniform(k, (1000,)))(kk)))
  # the second half takes part in the bits
  other = jr.wrap_key_data(jnp.asarray(np.array([1, 2, 3, 5], np.uint32)), impl=impl)
  assert not np.array_equal(np.asarray(jr.bits(kk, (8,))), np.asarray(jr.bits(other, (8,))))
  with pytest.raises(TypeError, match="invalid PRNG key data"):
    jr.wrap_key_data(jnp.zeros((2,), jnp.uint32), impl=impl)


def test_prng_config_flags():
  with ourjax.default_prng_impl("rbg"):
    assert jr.key(0).dtype == jr.key_dtype("rbg")
    assert jr.PRNGKey(0).shape == (4,)
    assert jr.split(jr.PRNGKey(0)).shape == (2, 4)
  assert jr.PRNGKey(0).shape == (2,)
  with ourjax.enable_custom_prng(True):
    assert jr.PRNGKey(7).dtype == jr.key_dtype()
  raw = jr.PRNGKey(0)
  with ourjax.legacy_prng_key("warn"):
    with pytest.warns(UserWarning, match="Legacy uint32 key array"):
      jr.uniform(raw)
  with ourjax.legacy_prng_key("error"):
    with pytest.raises(ValueError, match="Legacy uint32 key array"):
      jr.uniform(raw)
    with warnings.catch_warnings():
      warnings.simplefilter("error")
      jr.uniform(jr.key(0))          # typed keys are never legacy


# Random123's known-answer vectors (kat_vectors: key and counter words -> output words)
PHILOX2_KAT = [((0x0,), (0x0, 0x0), (0xff1dae59, 0x6cd10df2)),
               ((0xffffffff,), (0xffffffff, 0xffffffff), (0x2c3f628b, 0xab4fd7ad)),
               ((0x13198a2e,), (0x243f6a88, 0x85a308d3), (0xdd7ce038, 0xf62a4c12))]
PHILOX4_KAT = [((0x0, 0x0), (0x0,) * 4, (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
               ((0xffffffff,) * 2, (0xffffffff,) * 4,
                (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
               ((0xa4093822, 0x299f31d0), (0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344),
                (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1))]
THREEFRY4_KAT = [((0x0,) * 4, (0x0,) * 4, (0x9c6ca96a, 0xe17eae66, 0xfc10ecd4, 0x5256a7d8)),
                 ((0xffffffff,) * 4, (0xffffffff,) * 4,
                  (0x2a881696, 0x57012287, 0xf6c7446e, 0xa16a6732)),
                 ((0xa4093822, 0x299f31d0, 0x082efa98, 0xec4e6c89),
                  (0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344),
                  (0x59cd1dbb, 0xb8879579, 0x86b5d00c, 0xac8b6d84))]


@pytest.mark.parametrize("fn,kat", [("philox2x32", PHILOX2_KAT), ("philox4x32", PHILOX4_KAT),
                                    ("threefry4x32", THREEFRY4_KAT)])
def test_block_functions_known_answers(fn, kat):
  from ourjax import prng
  f = getattr(prng, fn)
  for k, ctr, expected in kat:
    words = [np.uint32(v) for v in k + ctr]
    assert tuple(int(np.asarray(y)) for y in f(*words)) == expected
    assert tuple(int(np.asarray(y)) for y in ourjax.jit(f)(*words)) == expected


@pytest.mark.parametrize("impl,key_shape", [("threefry4x32", (4,)), ("philox2x32", (1,)),
                                            ("philox4x32", (2,))])
def test_counter_based_impls(impl, key_shape):
  k = jr.key(1701, impl=impl)
  assert data(k).shape == key_shape and jr.PRNGKey(1701, impl=impl).shape == key_shape
  # split's index and fold_in's datum sit in the same counter word: fold_in(k, i) == split[i]
  ks = jr.split(k, 4)
  for i in range(4):
    np.testing.assert_array_equal(data(jr.fold_in(k, i)), data(ks[i]))
  b = np.asarray(jr.bits(k, (3, 4)))
  np.testing.assert_array_equal(b, np.asarray(ourjax.jit(lambda k: jr.bits(k, (3, 4)))(k)))
  np.testing.assert_array_equal(np.asarray(jr.bits(k, (12,))), b.ravel())
  np.testing.assert_array_equal(np.asarray(jr.bits(k, (12,), jnp.uint8)),
                                b.ravel().astype(np.uint8))
  u = np.asarray(jr.uniform(jr.split(k)[1], (2000,)))
  assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.03
  assert len(np.unique(np.asarray(jr.bits(k, (2000,))))) > 1990
  # keys seeded differently differ
  assert not np.array_equal(data(jr.key(1, impl=impl)), data(jr.key(2, impl=impl)))


def test_arrays_assembled_from_device_blocks():
  devices = ourjax.devices()
  mesh = ourjax.sharding.Mesh(np.array(devices), ("x",))
  s = ourjax.NamedSharding(mesh, ourjax.P("x"))
  n = 2 * len(devices)
  full = np.arange(3.0 * n, dtype=np.float32).reshape(n, 3)
  x = ourjax.make_array_from_callback((n, 3), s, lambda idx: full[idx])
  np.testing.assert_array_equal(np.asarray(x), full)
  ks = jr.split(jr.key(1), n)
  k2 = ourjax.make_array_from_callback((n,), s, lambda idx: ks[idx])
  assert k2.dtype == ks.dtype
  np.testing.assert_array_equal(data(k2), data(ks))
  blocks = [ourjax.device_put(full[idx], d) for d, idx in s.devices_indices_map((n, 3)).items()]
  y = ourjax.make_array_from_single_device_arrays((n, 3), s, blocks)
  np.testing.assert_array_equal(np.asarray(y), full)
