"""Array operators refuse Python containers as JAX does, and the tracer errors carry JAX's base
classes (checked against JAX 0.10.2)."""
import operator

import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax import errors

OPS = [operator.eq, operator.ne, operator.lt, operator.ge, operator.add, operator.mul,
       operator.matmul, operator.truediv, operator.and_]


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.__name__)
@pytest.mark.parametrize("other", [[0., 1., 2.], (0., 1., 2.), {1.}, {0: 1.}],
                         ids=["list", "tuple", "set", "dict"])
def test_container_operand_is_a_type_error(op, other):
  x = jnp.arange(3.)
  # JAX 0.10.2: `x == [0., 1., 2.]` raises "unsupported operand type(s) for ==: 'ArrayImpl'
  # and 'list'" (Python's default would be False; `x * [1, 2]` would be list repetition)
  with pytest.raises(TypeError, match="unsupported operand|not supported"):
    op(x, other)
  with pytest.raises(TypeError, match="unsupported operand|not supported"):
    op(other, x)
  with pytest.raises(TypeError, match="unsupported operand|not supported"):
    ourjax.jit(lambda v: op(v, other))(x)


def test_scalars_and_arrays_still_work_and_none_is_not_equal():
  x = jnp.arange(3.)
  assert (x == 1.).tolist() == [False, True, False]
  assert (x + jnp.ones(3)).tolist() == [1., 2., 3.]
  assert (x == None) is False      # noqa: E711  (as JAX: Python's fallback for None)


def test_error_base_classes_match_jax():
  assert issubclass(errors.ConcretizationTypeError, errors.JAXTypeError)
  assert issubclass(errors.TracerBoolConversionError, errors.ConcretizationTypeError)
  assert issubclass(errors.TracerArrayConversionError, errors.JAXTypeError)
  assert issubclass(errors.UnexpectedTracerError, TypeError)
  assert issubclass(errors.KeyReuseError, TypeError)
  assert issubclass(errors.NonConcreteBooleanIndexError, errors.JAXIndexError)
  assert issubclass(errors.JAXIndexError, IndexError)
  with pytest.raises(errors.ConcretizationTypeError) as info:
    ourjax.jit(lambda v: int(v))(1.)
  assert isinstance(info.value, errors.JAXTypeError)


def test_invalid_argument_messages_are_jaxs():
  import numpy as np
  # JAX 0.10.2: "Argument 'foo' of type <class 'str'> is not a valid JAX type"
  with pytest.raises(TypeError, match=r"^Argument 'foo' of type <class 'str'> is not a valid "
                                      "JAX type"):
    ourjax.grad(lambda x: x)("foo")
  with pytest.raises(TypeError, match="is not a valid JAX type"):
    ourjax.grad(lambda x: x)(np.array([1, 2, 3], dtype=object))
  # jit: "Error interpreting argument to <fun> as an abstract array ... at path x."
  with pytest.raises(TypeError, match="Error interpreting argument to .* as an abstract array. "
                                      "The problematic value is of type .* and was passed to "
                                      "the function at path x."):
    ourjax.jit(lambda x: x)("foo")
  with pytest.raises(TypeError, match=r"at path b\['k'\]"):
    ourjax.jit(lambda a, b: a)(1., {"k": jnp.int32})
