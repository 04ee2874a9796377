"""``lax.rng_bit_generator``: XLA's stateful-style bit generator, as JAX exposes it.

The key is a ``uint32[4]`` state (or ``uint64[2]`` with x64): two words of key and a 64-bit
block counter (words 2 and 3, low word first).  ``RNG_PHILOX`` (also ``RNG_DEFAULT``, as on
XLA's CPU backend) hashes one counter value per block of four 32-bit words with Philox-4x32-10,
``RNG_THREE_FRY`` one per two words with Threefry-2x32-20; each element takes one word (two
for 64-bit dtypes, the low word first) and narrower dtypes keep the low bits of theirs.  The
returned key is the input key with its counter advanced past the blocks used, exactly as
XLA's (so drawing nothing returns the key unchanged); the bits themselves are ourjax's: XLA's
stream differs between its backends and is not reproduced.

A composition of uint32 primitives, so it jits and vmaps as they do.
"""
from __future__ import annotations

import enum
import math
import warnings

import numpy as np

from ourjax import dtypes
from ourjax.core import get_aval

_U32 = np.dtype(np.uint32)


class RandomAlgorithm(enum.IntEnum):
  """The bit generator's algorithm (JAX's ``lax.RandomAlgorithm``)."""
  RNG_DEFAULT = 0
  RNG_THREE_FRY = 1
  RNG_PHILOX = 2

  def __str__(self):
    return self.name


def _key_words(key):
  """The four uint32 words of a uint32[4] or uint64[2] key."""
  from ourjax import lax
  from ourjax import numpy as jnp
  key = jnp.asarray(key)
  a = get_aval(key)
  if a.dtype == _U32 and a.shape == (4,):
    return [lax.reshape(lax.slice(key, (i,), (i + 1,)), ()) for i in range(4)]
  if a.dtype == np.uint64 and a.shape == (2,):
    words = []
    for i in range(2):
      w = lax.reshape(lax.slice(key, (i,), (i + 1,)), ())
      words += [lax.convert_element_type(lax.and_(w, np.uint64(0xFFFFFFFF)), _U32),
                lax.convert_element_type(lax.shift_right_logical(w, np.uint64(32)), _U32)]
    return words
  raise TypeError(f"rng_bit_generator: the key must be uint32[4] (or uint64[2] with x64), got "
                  f"{a.dtype.name}{list(a.shape)}")


def _counter_add(lo, hi, n):
  """(lo, hi) + n for a uint32 array or scalar ``n``, with the carry into the high word."""
  from ourjax import lax
  new_lo = lax.add(lo, n)
  carry = lax.convert_element_type(lax.lt(new_lo, lo), _U32)
  return new_lo, lax.add(hi, carry)


def rng_bit_generator(key, shape, dtype=np.uint32, algorithm=RandomAlgorithm.RNG_DEFAULT, *,
                      out_sharding=None):
  """``(new_key, bits)``: ``bits`` of ``shape`` and unsigned ``dtype`` drawn from ``key``'s
  stream, and the key advanced past them (see the module's docstring)."""
  from ourjax import lax, prng
  from ourjax.lax._utils import as_shape
  shape = as_shape(shape)
  dt = np.dtype(dtype)
  if dt not in (np.uint8, np.uint16, np.uint32, np.uint64):
    raise TypeError(f"rng_bit_generator: unsupported dtype {dt.name}")
  canon = dtypes.canonicalize_dtype(dt)
  if canon != dt:
    warnings.warn(f"Explicitly requested dtype {dt.name} requested in rng_bit_generator is not "
                  f"available, and will be truncated to dtype {canon.name}. To enable more "
                  "dtypes, set the jax_enable_x64 configuration option.", UserWarning,
                  stacklevel=2)
    dt = canon
  algorithm = RandomAlgorithm(algorithm)
  k0, k1, c_lo, c_hi = _key_words(key)
  size = math.prod(shape)
  per = 2 if dt.itemsize == 8 else 1
  n_words = size * per
  width = 2 if algorithm == RandomAlgorithm.RNG_THREE_FRY else 4
  blocks = -(-n_words // width)
  new_lo, new_hi = _counter_add(c_lo, c_hi, np.uint32(blocks))
  new_key = lax.concatenate([lax.reshape(w, (1,)) for w in (k0, k1, new_lo, new_hi)], 0)
  if get_aval(key).dtype == np.uint64:
    new_key = lax.bitcast_convert_type(lax.reshape(new_key, (2, 2)), np.uint64)
  if size == 0:
    return new_key, lax.full(shape, 0, dt)
  lo, hi = _counter_add(c_lo, c_hi, lax.iota(_U32, blocks))
  if algorithm == RandomAlgorithm.RNG_THREE_FRY:
    outs = prng.threefry2x32(k0, k1, lo, hi)
  else:
    zero = lax.full((blocks,), 0, _U32)
    outs = prng.philox4x32(k0, k1, lo, hi, zero, zero)
  words = lax.reshape(lax.concatenate([lax.reshape(o, (blocks, 1)) for o in outs], 1),
                      (blocks * width,))
  words = lax.slice(words, (0,), (n_words,))
  if per == 2:
    pairs = lax.convert_element_type(lax.reshape(words, (size, 2)), np.uint64)
    low = lax.reshape(lax.slice(pairs, (0, 0), (size, 1)), (size,))
    high = lax.reshape(lax.slice(pairs, (0, 1), (size, 2)), (size,))
    words = lax.or_(low, lax.shift_left(high, np.uint64(32)))
  elif dt != _U32:
    words = lax.convert_element_type(words, dt)      # (the low bits)
  return new_key, lax.reshape(words, shape)
