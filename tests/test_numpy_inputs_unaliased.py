"""Operations given the caller's NumPy arrays neither make them read-only nor alias them (JAX
copies host inputs): after the call the caller may write to its array, and ourjax's result
keeps its value."""
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import lax

_OPS = {
    "convert_same_dtype": lambda x: lax.convert_element_type(x, np.float32),
    "reshape": lambda x: lax.reshape(x, (4, 3)),
    "reduce_precision": lambda x: lax.reduce_precision(x, 8, 23),
    "asarray": jnp.asarray,
    "array": jnp.array,
    "transpose": lambda x: lax.transpose(x, (1, 0)),
    "squeeze_noop": lambda x: lax.squeeze(x, ()),
    "expand_dims": lambda x: lax.expand_dims(x, (0,)),
    "slice_all": lambda x: lax.slice(x, (0, 0), (3, 4)),
    "jvp_det": lambda x: ourjax.jvp(jnp.linalg.det, (x[:3, :3],), (x[:3, :3],))[1],
    "grad": lambda x: ourjax.grad(lambda y: (y * y).sum())(x),
    "jit": lambda x: ourjax.jit(lambda y: y)(x),
    "vmap_identity": lambda x: ourjax.vmap(lambda y: y)(x),
}


@pytest.mark.parametrize("name", sorted(_OPS))
def test_caller_array_stays_writable_and_unaliased(name):
  x = np.arange(12, dtype=np.float32).reshape(3, 4) + 1
  before = x.copy()
  out = _OPS[name](x)
  want = np.asarray(out).copy()
  assert x.flags.writeable, f"{name} made the caller's array read-only"
  np.testing.assert_array_equal(x, before)
  x[...] = -7                       # the caller writes to its array ...
  np.testing.assert_array_equal(np.asarray(out), want)   # ... and ourjax's result keeps its value
