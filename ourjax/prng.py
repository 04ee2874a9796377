"""PRNG implementations for ``ourjax.random``: Threefry-2x32 (the default), Threefry-4x32,
Philox-2x32, Philox-4x32 and the ``rbg`` family.

Each implementation is a ``_keys.PRNGImpl`` whose functions act on one key's ``uint32`` data:

* ``threefry2x32`` (the default; key data ``uint32[2]``): Threefry-2x32 with 20 rounds (Salmon
  et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11), written with ourjax's uint32
  primitives, so it traces, jits and vmaps like any other array code.  The bit streams are
  JAX's with its default ``jax_threefry_partitionable=True``:

  - ``random_bits(key, shape)``: element ``i`` (row-major flat index) hashes the counter pair
    ``(0, i)`` under the key; the two output words are xor-ed (32 bits) or concatenated (64).
  - ``split(key, shape)``: element ``i`` of the result is the hash of ``(0, i)`` (both words).
  - ``fold_in(key, d)``: the hash of the single counter pair ``(0, d)``.

* ``threefry4x32`` (key data ``uint32[4]``), ``philox2x32`` (``uint32[1]``) and ``philox4x32``
  (``uint32[2]``): Random123's Threefry-4x32-20, Philox-2x32-10 and Philox-4x32-10 block
  functions, with JAX's placement of the seed, split index, fold-in datum and element index in
  the counter words (noted at each function), so keys and bits are JAX's bit for bit.

* ``rbg`` and ``unsafe_rbg`` (key data ``uint32[4]``, two threefry keys side by side): seeding,
  ``split`` and ``fold_in`` apply the threefry functions to each half, as JAX does, so keys
  agree with JAX's bit for bit.  JAX draws their random bits with XLA's ``RngBitGenerator``,
  whose stream JAX itself does not fix across backends; ourjax draws them with threefry under a
  key that mixes both halves (the threefry hash of the second half under the first), so rbg
  samples are not JAX's.  ``unsafe_rbg`` splits like ``rbg`` here (JAX splits it with
  ``RngBitGenerator`` too).
"""
from __future__ import annotations

import math

import numpy as np

from ourjax import dtypes, lax
from ourjax import numpy as jnp
from ourjax._keys import PRNG_IMPLS, PRNGImpl
from ourjax.core import Tracer, get_aval

_U32 = np.dtype(np.uint32)
_UINT_DTYPES = {8: np.dtype(np.uint8), 16: np.dtype(np.uint16), 32: np.dtype(np.uint32),
                64: np.dtype(np.uint64)}


def _shape_of(x):
  return get_aval(x).shape if isinstance(x, Tracer) else np.shape(x)


def _bcast(x, shape):
  if _shape_of(x) == tuple(shape):
    return x
  return jnp.broadcast_to(x, shape)


def _check_raw_key(name, key):
  key = jnp.asarray(key)
  if key.dtype != _U32 or key.shape != (2,):
    raise TypeError(f"{name}: expected a uint32[2] threefry key, got "
                    f"{key.dtype.name}{list(key.shape)}")
  return key


# ---------------------------------------------------------------------------------------------
# Threefry-2x32


_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_KS_PARITY = 0x1BD11BDA


def _u32(v):
  return np.uint32(v)


def _rotl(x, d: int):
  return lax.or_(lax.shift_left(x, _u32(d)), lax.shift_right_logical(x, _u32(32 - d)))


def threefry2x32(key1, key2, x1, x2):
  """The Threefry-2x32 block function (20 rounds) on uint32 values.

  ``key1, key2`` are the two key words, ``x1, x2`` the two counter words; rank-0 operands
  broadcast against the others.  Returns the two output words.

  The 20 rounds are 5 iterations of a ``fori_loop`` over 4 rounds and a key injection (JAX's
  CPU lowering does the same): the traced program stays small, which keeps compile times
  short, and the loop carries the key schedule and the rotation constants.
  """
  for v in (key1, key2, x1, x2):
    if dtypes.dtype(v) != _U32:
      raise TypeError("threefry2x32 requires uint32 arguments, got "
                      f"{[dtypes.dtype(a).name for a in (key1, key2, x1, x2)]}")
  ks2 = lax.xor(lax.xor(key1, key2), _u32(_KS_PARITY))
  shape = np.broadcast_shapes(*(_shape_of(v) for v in (key1, key2, x1, x2)))
  x1 = lax.add(_bcast(x1, shape), key1)
  x2 = lax.add(_bcast(x2, shape), key2)

  def step(i, state):
    x1, x2, k0, k1, k2, rot_now, rot_next = state
    for j in range(4):
      r = lax.reshape(lax.slice(rot_now, (j,), (j + 1,)), ())
      x1 = lax.add(x1, x2)
      x2 = lax.xor(x1, lax.or_(lax.shift_left(x2, r),
                               lax.shift_right_logical(x2, lax.sub(_u32(32), r))))
    # key injection after every four rounds; the key words rotate one place each time
    x1 = lax.add(x1, k0)
    x2 = lax.add(lax.add(x2, k1), lax.convert_element_type(i + 1, _U32))
    return x1, x2, k1, k2, k0, rot_next, rot_now

  rotations = (np.array(_ROTATIONS[0], _U32), np.array(_ROTATIONS[1], _U32))
  out = lax.fori_loop(0, 5, step, (x1, x2, key2, ks2, key1) + rotations)
  return out[0], out[1]


def threefry_2x32(keypair, count):
  """Hash the uint32 array ``count`` under ``keypair`` (JAX's ``threefry_2x32``): the flattened
  counts (padded with a zero to even length) are cut into two halves that form the counter
  pairs; the two output halves are concatenated back into ``count``'s shape."""
  key = _check_raw_key("threefry_2x32", keypair)
  count = jnp.asarray(count)
  if count.dtype != _U32:
    raise TypeError(f"threefry_2x32 requires uint32 counts, got {count.dtype}")
  shape = count.shape
  flat = lax.reshape(count, (math.prod(shape),))
  n = math.prod(shape)
  odd = n % 2
  if odd:
    flat = lax.concatenate([flat, np.zeros((1,), _U32)], 0)
  half = (n + odd) // 2
  x1 = lax.slice(flat, (0,), (half,))
  x2 = lax.slice(flat, (half,), (2 * half,))
  k1, k2 = _key_words(key)
  y1, y2 = threefry2x32(k1, k2, x1, x2)
  out = lax.concatenate([y1, y2], 0)
  if odd:
    out = lax.slice(out, (0,), (n,))
  return lax.reshape(out, shape)



def _key_words(key):
  return (lax.reshape(lax.slice(key, (0,), (1,)), ()),
          lax.reshape(lax.slice(key, (1,), (2,)), ()))


def _counters(shape):
  """The (high, low) words of the row-major flat index of every element of ``shape``."""
  n = math.prod(shape)
  if n > 2 ** 32:
    raise NotImplementedError(f"random bits arrays of more than 2**32 elements ({n})")
  lo = lax.reshape(lax.iota(_U32, n), shape)
  hi = lax.full(shape, 0, _U32)
  return hi, lo


def _hash_counters(key, shape):
  k1, k2 = _key_words(key)
  hi, lo = _counters(shape)
  return threefry2x32(k1, k2, hi, lo)


def threefry_seed(seed):
  """The threefry key data ``[high word, low word]`` of an integer scalar ``seed`` (a Python
  int, NumPy scalar or array; ``seed`` has already been checked and, with x64 off, narrowed)."""
  if not isinstance(seed, Tracer):
    s = np.asarray(seed)
    v = int(s) % 2 ** (s.dtype.itemsize * 8)
    hi = (v >> 32) if s.dtype.itemsize == 8 else 0
    return jnp.asarray(np.array([hi, v & 0xFFFFFFFF], dtype=_U32))
  dt = get_aval(seed).dtype
  lo = lax.convert_element_type(seed, _U32)
  if dt.itemsize == 8:
    hi = lax.convert_element_type(lax.shift_right_logical(seed, np.array(32, dt)), _U32)
  else:
    hi = lax.full((), 0, _U32)
  return lax.concatenate([lax.expand_dims(hi, (0,)), lax.expand_dims(lo, (0,))], 0)


def threefry_split(key, shape):
  b1, b2 = _hash_counters(key, shape)
  nd = len(shape)
  return lax.concatenate([lax.expand_dims(b1, (nd,)), lax.expand_dims(b2, (nd,))], nd)


def threefry_fold_in(key, data):
  """``data``: a uint32 scalar."""
  k1, k2 = _key_words(key)
  y1, y2 = threefry2x32(k1, k2, np.zeros((1,), _U32), lax.reshape(data, (1,)))
  return lax.concatenate([y1, y2], 0)


def threefry_random_bits(key, bit_width: int, shape):
  b1, b2 = _hash_counters(key, shape)
  if bit_width == 64:
    dt = _UINT_DTYPES[64]
    hi = lax.convert_element_type(b1, dt)
    lo = lax.convert_element_type(b2, dt)
    return lax.or_(lax.shift_left(hi, np.array(32, dt)), lo)
  out = lax.xor(b1, b2)
  if bit_width != 32:
    out = lax.convert_element_type(out, _UINT_DTYPES[bit_width])
  return out


def _halves(key):
  return lax.slice(key, (0,), (2,)), lax.slice(key, (2,), (4,))


def rbg_seed(seed):
  half = threefry_seed(seed)
  return lax.concatenate([half, half], 0)


def rbg_split(key, shape):
  a, b = _halves(key)
  nd = len(shape)
  return lax.concatenate([threefry_split(a, shape), threefry_split(b, shape)], nd)


def rbg_fold_in(key, data):
  a, b = _halves(key)
  return lax.concatenate([threefry_fold_in(a, data), threefry_fold_in(b, data)], 0)


def rbg_random_bits(key, bit_width: int, shape):
  a, b = _halves(key)
  k1, k2 = _key_words(a)
  m1, m2 = _key_words(b)
  y1, y2 = threefry2x32(k1, k2, m1, m2)
  mixed = lax.concatenate([lax.expand_dims(y1, (0,)), lax.expand_dims(y2, (0,))], 0)
  return threefry_random_bits(mixed, bit_width, shape)


# ---------------------------------------------------------------------------------------------
# Philox-2x32-10, Philox-4x32-10 and Threefry-4x32-20 (Random123's block functions), with JAX's
# choice of which counter words carry the seed, the split index, the fold-in datum and the
# element index (see each function).

_PHILOX_M2 = np.uint32(0xD256D193)
_PHILOX_M4 = (np.uint32(0xD2511F53), np.uint32(0xCD9E8D57))
_PHILOX_W = (np.uint32(0x9E3779B9), np.uint32(0xBB67AE85))


def philox2x32(k0, x0, x1):
  """Philox-2x32 with 10 rounds: key word ``k0``, counter ``(x0, x1)``; rank-0 operands
  broadcast."""
  shape = np.broadcast_shapes(*(_shape_of(v) for v in (k0, x0, x1)))
  x0, x1 = _bcast(_as_u32(x0), shape), _bcast(_as_u32(x1), shape)
  k0 = _as_u32(k0)
  m = _bcast(_PHILOX_M2, shape)
  for r in range(10):
    if r:
      k0 = lax.add(k0, _PHILOX_W[0])
    hi, lo = lax.mulhi(m, x0), lax.mul(m, x0)
    x0, x1 = lax.xor(lax.xor(hi, x1), k0), lo
  return x0, x1


def philox4x32(k0, k1, x0, x1, x2, x3):
  """Philox-4x32 with 10 rounds: key ``(k0, k1)``, counter ``(x0, x1, x2, x3)``."""
  shape = np.broadcast_shapes(*(_shape_of(v) for v in (k0, k1, x0, x1, x2, x3)))
  x0, x1, x2, x3 = (_bcast(_as_u32(v), shape) for v in (x0, x1, x2, x3))
  k0, k1 = _as_u32(k0), _as_u32(k1)
  m0, m1 = _bcast(_PHILOX_M4[0], shape), _bcast(_PHILOX_M4[1], shape)
  for r in range(10):
    if r:
      k0, k1 = lax.add(k0, _PHILOX_W[0]), lax.add(k1, _PHILOX_W[1])
    hi0, lo0 = lax.mulhi(m0, x0), lax.mul(m0, x0)
    hi1, lo1 = lax.mulhi(m1, x2), lax.mul(m1, x2)
    x0, x1, x2, x3 = (lax.xor(lax.xor(hi1, x1), k0), lo1,
                      lax.xor(lax.xor(hi0, x3), k1), lo0)
  return x0, x1, x2, x3


_ROTATIONS_4 = ((10, 26), (11, 21), (13, 27), (23, 5), (6, 20), (17, 11), (25, 10), (18, 20))


def threefry4x32(k0, k1, k2, k3, x0, x1, x2, x3):
  """Threefry-4x32 with 20 rounds: key ``(k0..k3)``, counter ``(x0..x3)``."""
  shape = np.broadcast_shapes(*(_shape_of(v) for v in (k0, k1, k2, k3, x0, x1, x2, x3)))
  ks = [_as_u32(k) for k in (k0, k1, k2, k3)]
  ks.append(lax.xor(lax.xor(lax.xor(lax.xor(ks[0], ks[1]), ks[2]), ks[3]), _u32(_KS_PARITY)))
  x = [lax.add(_bcast(_as_u32(v), shape), k) for v, k in zip((x0, x1, x2, x3), ks)]
  for r in range(20):
    a, b = _ROTATIONS_4[r % 8]
    if r % 2 == 0:
      x[0] = lax.add(x[0], x[1])
      x[1] = lax.xor(x[0], _rotl(x[1], a))
      x[2] = lax.add(x[2], x[3])
      x[3] = lax.xor(x[2], _rotl(x[3], b))
    else:
      x[0] = lax.add(x[0], x[3])
      x[3] = lax.xor(x[0], _rotl(x[3], a))
      x[2] = lax.add(x[2], x[1])
      x[1] = lax.xor(x[2], _rotl(x[1], b))
    if r % 4 == 3:
      i = r // 4
      x = [lax.add(x[j], ks[(1 + i + j) % 5]) for j in range(4)]
      x[3] = lax.add(x[3], _u32(1 + i))
  return tuple(x)


def _as_u32(v):
  if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
    return np.uint32(v)
  return v


def _seed_words(seed):
  """The (high, low) uint32 words of an integer seed (high is 0 for a 32-bit seed)."""
  data = threefry_seed(seed)
  return lax.reshape(lax.slice(data, (0,), (1,)), ()), lax.reshape(lax.slice(data, (1,), (2,)), ())


def _words(key, n):
  return [lax.reshape(lax.slice(key, (i,), (i + 1,)), ()) for i in range(n)]


def _stack_last(parts):
  nd = len(_shape_of(parts[0]))
  return lax.concatenate([lax.expand_dims(p, (nd,)) for p in parts], nd)


def _fold_bits(outs, bit_width, shape, wide):
  """The bits of ``bit_width`` from block outputs ``outs``: xor of all words (8 to 32 bits) or
  ``wide = (hi, lo)`` words joined (64 bits)."""
  if bit_width == 64:
    dt = _UINT_DTYPES[64]
    hi, lo = (lax.convert_element_type(w, dt) for w in wide)
    return lax.or_(lax.shift_left(hi, np.array(32, dt)), lo)
  out = outs[0]
  for o in outs[1:]:
    out = lax.xor(out, o)
  return out if bit_width == 32 else lax.convert_element_type(out, _UINT_DTYPES[bit_width])


# philox2x32 (key data uint32[1]): seed = word 0 of philox(0; seed_hi, seed_lo); split and bits
# hash the element index (hi, lo); fold_in hashes (0, d).
def philox2x32_seed(seed):
  hi, lo = _seed_words(seed)
  return lax.reshape(philox2x32(np.uint32(0), hi, lo)[0], (1,))


def philox2x32_split(key, shape):
  hi, lo = _counters(shape)
  return lax.expand_dims(philox2x32(_words(key, 1)[0], hi, lo)[0], (len(shape),))


def philox2x32_fold_in(key, data):
  return lax.reshape(philox2x32(_words(key, 1)[0], np.uint32(0), data)[0], (1,))


def philox2x32_random_bits(key, bit_width, shape):
  hi, lo = _counters(shape)
  y0, y1 = philox2x32(_words(key, 1)[0], hi, lo)
  return _fold_bits((y0, y1), bit_width, shape, (y0, y1))


# philox4x32 (key data uint32[2]): seed = words 0, 1 of philox(0, 0; seed_hi, seed_lo, 0, 0);
# split hashes (0, 0, hi, lo) of the index, bits (hi, lo, 0, 0), fold_in (0, 0, 0, d).
def philox4x32_seed(seed):
  hi, lo = _seed_words(seed)
  y = philox4x32(np.uint32(0), np.uint32(0), hi, lo, np.uint32(0), np.uint32(0))
  return _stack_last(y[:2])


def philox4x32_split(key, shape):
  hi, lo = _counters(shape)
  z = lax.full(shape, 0, _U32)
  return _stack_last(philox4x32(*_words(key, 2), z, z, hi, lo)[:2])


def philox4x32_fold_in(key, data):
  z = np.uint32(0)
  return _stack_last(philox4x32(*_words(key, 2), z, z, z, data)[:2])


def philox4x32_random_bits(key, bit_width, shape):
  hi, lo = _counters(shape)
  z = lax.full(shape, 0, _U32)
  y = philox4x32(*_words(key, 2), hi, lo, z, z)
  return _fold_bits(y, bit_width, shape, y[:2])


# threefry4x32 (key data uint32[4]): seed = threefry4x32(seed_hi, seed_lo, 0, 0; 0, 0, 0, 0);
# split hashes (0, 0, hi, lo) of the index, bits (hi, lo, 0, 0), fold_in (0, 0, 0, d); 64-bit
# bits join (y0 ^ y2, y1 ^ y3).
def threefry4x32_seed(seed):
  hi, lo = _seed_words(seed)
  z = np.uint32(0)
  return _stack_last(threefry4x32(hi, lo, z, z, z, z, z, z))


def threefry4x32_split(key, shape):
  hi, lo = _counters(shape)
  z = lax.full(shape, 0, _U32)
  return _stack_last(threefry4x32(*_words(key, 4), z, z, hi, lo))


def threefry4x32_fold_in(key, data):
  z = np.uint32(0)
  return _stack_last(threefry4x32(*_words(key, 4), z, z, z, data))


def threefry4x32_random_bits(key, bit_width, shape):
  hi, lo = _counters(shape)
  z = lax.full(shape, 0, _U32)
  y = threefry4x32(*_words(key, 4), hi, lo, z, z)
  return _fold_bits(y, bit_width, shape, (lax.xor(y[0], y[2]), lax.xor(y[1], y[3])))


for _impl in (PRNGImpl("threefry2x32", (2,), "fry", threefry_seed, threefry_split,
                       threefry_fold_in, threefry_random_bits),
              PRNGImpl("rbg", (4,), "rbg", rbg_seed, rbg_split, rbg_fold_in, rbg_random_bits),
              PRNGImpl("unsafe_rbg", (4,), "urbg", rbg_seed, rbg_split, rbg_fold_in,
                       rbg_random_bits),
              PRNGImpl("threefry4x32", (4,), "fry4", threefry4x32_seed, threefry4x32_split,
                       threefry4x32_fold_in, threefry4x32_random_bits),
              PRNGImpl("philox2x32", (1,), "phx2", philox2x32_seed, philox2x32_split,
                       philox2x32_fold_in, philox2x32_random_bits),
              PRNGImpl("philox4x32", (2,), "phx4", philox4x32_seed, philox4x32_split,
                       philox4x32_fold_in, philox4x32_random_bits)):
  PRNG_IMPLS[_impl.name] = _impl
