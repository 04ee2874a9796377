"""Helpers of the distribution modules: argument checks/promotion and support masks."""
import numpy as np

from ourjax.numpy import _util


def args(name, *xs):
  _util.check_arraylike(name, *xs)
  return _util.promote_args_inexact(name, *xs)


def jnp():
  import ourjax.numpy as _jnp
  return _jnp


NEG_INF = -np.inf


def dtype_args(name, *xs):
  """Check and promote to a common inexact dtype, without broadcasting the shapes."""
  _util.check_arraylike(name, *xs)
  return _util.promote_dtypes_inexact(*xs)
