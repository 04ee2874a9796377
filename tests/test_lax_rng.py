"""``lax.rng_bit_generator``: the key's counter advances as XLA's does (one step per block of
four words for Philox, two for Threefry, so drawing nothing returns the key), the blocks are
the Random123 block functions of the counters (known-answer values), and the bits are the same
eagerly, under jit and under vmap."""
import numpy as np
import pytest

import ourjax
from ourjax import lax

_ALGS = [lax.RandomAlgorithm.RNG_DEFAULT, lax.RandomAlgorithm.RNG_PHILOX,
         lax.RandomAlgorithm.RNG_THREE_FRY]


@pytest.mark.parametrize("alg", _ALGS)
@pytest.mark.parametrize("shape,dtype", [((3,), np.uint32), ((4,), np.uint32), ((5,), np.uint32),
                                         ((9,), np.uint8), ((3,), np.uint16), ((0,), np.uint32),
                                         ((2, 3), np.uint8)])
def test_key_advances_past_the_blocks_used(alg, shape, dtype):
  key = np.array([3, 1, 0xFFFFFFFF, 2], np.uint32)      # the counter's low word wraps
  new_key, bits = lax.rng_bit_generator(key, shape, dtype=dtype, algorithm=alg)
  assert bits.shape == shape and bits.dtype == dtype
  width = 2 if alg == lax.RandomAlgorithm.RNG_THREE_FRY else 4
  blocks = -(-int(np.prod(shape)) // width)
  counter = (0xFFFFFFFF + (2 << 32) + blocks)
  np.testing.assert_array_equal(np.asarray(new_key),
                                [3, 1, counter & 0xFFFFFFFF, counter >> 32])


def test_known_answers():
  # Random123's known-answer vectors for a zero key and counter
  bits = lax.rng_bit_generator(np.zeros(4, np.uint32), (4,))[1]
  np.testing.assert_array_equal(np.asarray(bits),
                                [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8])
  bits = lax.rng_bit_generator(np.zeros(4, np.uint32), (2,),
                               algorithm=lax.RandomAlgorithm.RNG_THREE_FRY)[1]
  np.testing.assert_array_equal(np.asarray(bits), [0x6B200159, 0x99BA4EFE])


def test_stream_continues_with_the_new_key():
  key = np.array([7, 9, 0, 0], np.uint32)
  k1, a = lax.rng_bit_generator(key, (8,))
  _, b = lax.rng_bit_generator(k1, (4,))
  _, ab = lax.rng_bit_generator(key, (12,))
  np.testing.assert_array_equal(np.concatenate([np.asarray(a), np.asarray(b)]), np.asarray(ab))
  # narrower dtypes keep the low bits of each word
  _, small = lax.rng_bit_generator(key, (8,), dtype=np.uint8)
  np.testing.assert_array_equal(np.asarray(small), np.asarray(a) & 0xFF)


def test_bits_look_uniform():
  _, bits = lax.rng_bit_generator(np.array([1, 2, 3, 4], np.uint32), (4096,))
  b = np.asarray(bits)
  per_bit = ((b[:, None] >> np.arange(32)) & 1).mean(0)
  assert np.all(np.abs(per_bit - 0.5) < 0.04)
  assert len(np.unique(b)) > 4000


def test_jit_and_vmap():
  f = lambda k: lax.rng_bit_generator(k, shape=(5, 7))
  key = np.array((1, 2, 3, 4), np.uint32)
  for x, y in zip(f(key), ourjax.jit(f)(key)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  keys = np.arange(24, dtype=np.uint32).reshape(2, 3, 4)
  out_keys, bits = ourjax.vmap(ourjax.vmap(f))(keys)
  assert out_keys.shape == (2, 3, 4) and bits.shape == (2, 3, 5, 7)
  k, b = f(keys[1, 2])
  np.testing.assert_array_equal(np.asarray(out_keys[1, 2]), np.asarray(k))
  np.testing.assert_array_equal(np.asarray(bits[1, 2]), np.asarray(b))


def test_errors():
  with pytest.raises(TypeError, match="uint32\\[4\\]"):
    lax.rng_bit_generator(np.array([1, 2, 3], np.uint32), (3,))
  with pytest.raises(TypeError, match="unsupported dtype int32"):
    lax.rng_bit_generator(np.zeros(4, np.uint32), (3,), dtype=np.int32)
