"""A tiny neural-network layer library in the style of ``jax.example_libraries.stax``.

A layer is a pair ``(init_fun, apply_fun)``:

* ``init_fun(rng, input_shape) -> (output_shape, params)``
* ``apply_fun(params, inputs, **kwargs) -> outputs`` (``rng=`` is passed down to layers that
  need randomness, e.g. ``Dropout``)

Combinators (``serial``, ``parallel``, ``FanOut``, ...) build networks from layers.  Parameter
initialisation draws keys the way JAX's stax does (one ``random.split`` per layer), so the same
key gives the same parameters as under JAX."""
from __future__ import annotations

import functools
import operator as op

import numpy as np

from ourjax import lax, random
import ourjax.numpy as jnp
from ourjax.nn import initializers
from ourjax.nn import (elu, gelu, leaky_relu, log_softmax, relu, selu, sigmoid, softmax,
                       softplus, standardize)
from ourjax.nn.initializers import glorot_normal, normal, ones, zeros

# (JAX's stax's short names for them)
glorot, randn, logsoftmax = glorot_normal, normal, log_softmax

__all__ = [
    "Dense", "GeneralConv", "Conv", "Conv1DTranspose", "ConvTranspose", "GeneralConvTranspose",
    "BatchNorm", "elementwise", "Tanh", "Relu", "Exp", "LogSoftmax", "Softmax", "Softplus",
    "Sigmoid", "Elu", "LeakyRelu", "Selu", "Gelu", "MaxPool", "SumPool", "AvgPool", "Flatten",
    "Identity", "FanOut", "FanInSum", "FanInConcat", "Dropout", "serial", "parallel",
    "shape_dependent", "initializers",
]


# ------------------------------------------------------------------------------------------------
# layers with parameters

def Dense(out_dim, W_init=glorot_normal(), b_init=normal()):
  """A fully connected layer: ``inputs @ W + b``."""
  def init_fun(rng, input_shape):
    output_shape = tuple(input_shape[:-1]) + (out_dim,)
    k1, k2 = random.split(rng)
    W, b = W_init(k1, (input_shape[-1], out_dim)), b_init(k2, (out_dim,))
    return output_shape, (W, b)

  def apply_fun(params, inputs, **kwargs):
    W, b = params
    return jnp.dot(inputs, W) + b
  return init_fun, apply_fun


def _kernel_shape(rhs_spec, out_chan, in_chan, filter_shape):
  spatial = iter(filter_shape)
  return [out_chan if c == "O" else in_chan if c == "I" else next(spatial) for c in rhs_spec]


def GeneralConv(dimension_numbers, out_chan, filter_shape, strides=None, padding="VALID",
                W_init=None, b_init=normal(1e-6)):
  """A convolution layer with the given ``(lhs_spec, rhs_spec, out_spec)`` layout strings."""
  lhs_spec, rhs_spec, out_spec = dimension_numbers
  one = (1,) * len(filter_shape)
  strides = strides or one
  W_init = W_init or glorot_normal(rhs_spec.index("I"), rhs_spec.index("O"))

  def init_fun(rng, input_shape):
    kernel_shape = _kernel_shape(rhs_spec, out_chan, input_shape[lhs_spec.index("C")],
                                 filter_shape)
    output_shape = lax.conv_general_shape_tuple(input_shape, kernel_shape, strides, padding,
                                                dimension_numbers)
    bias_shape = [out_chan if c == "C" else 1 for c in out_spec]
    k1, k2 = random.split(rng)
    return output_shape, (W_init(k1, kernel_shape), b_init(k2, bias_shape))

  def apply_fun(params, inputs, **kwargs):
    W, b = params
    return lax.conv_general_dilated(inputs, W, strides, padding, one, one,
                                    dimension_numbers=dimension_numbers) + b
  return init_fun, apply_fun


Conv = functools.partial(GeneralConv, ("NHWC", "HWIO", "NHWC"))


def GeneralConvTranspose(dimension_numbers, out_chan, filter_shape, strides=None,
                         padding="VALID", W_init=None, b_init=normal(1e-6)):
  """A transposed-convolution layer with the given layout strings."""
  lhs_spec, rhs_spec, out_spec = dimension_numbers
  one = (1,) * len(filter_shape)
  strides = strides or one
  W_init = W_init or glorot_normal(rhs_spec.index("I"), rhs_spec.index("O"))

  def apply_conv(inputs, W):
    return lax.conv_transpose(inputs, W, strides, padding, dimension_numbers=dimension_numbers)

  def init_fun(rng, input_shape):
    kernel_shape = _kernel_shape(rhs_spec, out_chan, input_shape[lhs_spec.index("C")],
                                 filter_shape)
    from ourjax import ShapeDtypeStruct, eval_shape
    out = eval_shape(apply_conv, ShapeDtypeStruct(tuple(input_shape), jnp.float32),
                     ShapeDtypeStruct(tuple(kernel_shape), jnp.float32))
    bias_shape = [out_chan if c == "C" else 1 for c in out_spec]
    k1, k2 = random.split(rng)
    return tuple(out.shape), (W_init(k1, kernel_shape), b_init(k2, bias_shape))

  def apply_fun(params, inputs, **kwargs):
    W, b = params
    return apply_conv(inputs, W) + b
  return init_fun, apply_fun


Conv1DTranspose = functools.partial(GeneralConvTranspose, ("NHC", "HIO", "NHC"))
ConvTranspose = functools.partial(GeneralConvTranspose, ("NHWC", "HWIO", "NHWC"))


def BatchNorm(axis=(0, 1, 2), epsilon=1e-5, center=True, scale=True, beta_init=zeros,
              gamma_init=ones):
  """Normalise over ``axis`` (batch statistics), then scale by gamma and shift by beta."""
  _beta_init = lambda rng, shape: beta_init(rng, shape) if center else ()
  _gamma_init = lambda rng, shape: gamma_init(rng, shape) if scale else ()
  axis = (axis,) if np.isscalar(axis) else axis

  def init_fun(rng, input_shape):
    shape = tuple(d for i, d in enumerate(input_shape) if i not in axis)
    k1, k2 = random.split(rng)
    return input_shape, (_beta_init(k1, shape), _gamma_init(k2, shape))

  def apply_fun(params, x, **kwargs):
    beta, gamma = params
    ed = tuple(None if i in axis else slice(None) for i in range(jnp.ndim(x)))
    z = standardize(x, axis, epsilon=epsilon)
    if center and scale:
      return gamma[ed] * z + beta[ed]
    if center:
      return z + beta[ed]
    if scale:
      return gamma[ed] * z
    return z
  return init_fun, apply_fun


# ------------------------------------------------------------------------------------------------
# elementwise layers

def elementwise(fun, **fun_kwargs):
  """A parameterless layer applying ``fun(inputs, **fun_kwargs)``."""
  init_fun = lambda rng, input_shape: (input_shape, ())
  apply_fun = lambda params, inputs, **kwargs: fun(inputs, **fun_kwargs)
  return init_fun, apply_fun


Tanh = elementwise(jnp.tanh)
Relu = elementwise(relu)
Exp = elementwise(jnp.exp)
LogSoftmax = elementwise(log_softmax, axis=-1)
Softmax = elementwise(softmax, axis=-1)
Softplus = elementwise(softplus)
Sigmoid = elementwise(sigmoid)
Elu = elementwise(elu)
LeakyRelu = elementwise(leaky_relu)
Selu = elementwise(selu)
Gelu = elementwise(gelu)


# ------------------------------------------------------------------------------------------------
# pooling

def _pooling_layer(reducer, init_val, rescaler=None):
  def PoolingLayer(window_shape, strides=None, padding="VALID", spec=None):
    """A pooling layer over the spatial axes (``spec``: layout string, default N...C)."""
    strides = strides or (1,) * len(window_shape)
    rescale = rescaler(window_shape, strides, padding) if rescaler else None
    if spec is None:
      non_spatial_axes = 0, len(window_shape) + 1
    else:
      non_spatial_axes = spec.index("N"), spec.index("C")
    for i in sorted(non_spatial_axes):
      window_shape = tuple(window_shape[:i]) + (1,) + tuple(window_shape[i:])
      strides = tuple(strides[:i]) + (1,) + tuple(strides[i:])

    def init_fun(rng, input_shape):
      pads = lax.padtype_to_pads(input_shape, window_shape, strides, padding)
      ones_ = (1,) * len(window_shape)
      out_shape = lax.reduce_window_shape_tuple(input_shape, window_shape, strides, pads, ones_,
                                                ones_)
      return tuple(out_shape), ()

    def apply_fun(params, inputs, **kwargs):
      out = lax.reduce_window(inputs, init_val, reducer, window_shape, strides, padding)
      return rescale(out, inputs, spec) if rescale else out
    return init_fun, apply_fun
  return PoolingLayer


def _normalize_by_window_size(dims, strides, padding):
  def rescale(outputs, inputs, spec):
    if spec is None:
      non_spatial_axes = 0, inputs.ndim - 1
    else:
      non_spatial_axes = spec.index("N"), spec.index("C")
    spatial_shape = tuple(inputs.shape[i] for i in range(inputs.ndim)
                          if i not in non_spatial_axes)
    window_sizes = lax.reduce_window(jnp.ones(spatial_shape, inputs.dtype), 0., lax.add, dims,
                                     strides, padding)
    for i in sorted(non_spatial_axes):
      window_sizes = jnp.expand_dims(window_sizes, i)
    return outputs / window_sizes
  return rescale


MaxPool = _pooling_layer(lax.max, -jnp.inf)
SumPool = _pooling_layer(lax.add, 0.)
AvgPool = _pooling_layer(lax.add, 0., _normalize_by_window_size)


# ------------------------------------------------------------------------------------------------
# shape layers and combinators

def Flatten():
  """Flatten all but the leading (batch) dimension."""
  def init_fun(rng, input_shape):
    return (input_shape[0], functools.reduce(op.mul, input_shape[1:], 1)), ()

  def apply_fun(params, inputs, **kwargs):
    return jnp.reshape(inputs, (inputs.shape[0], -1))
  return init_fun, apply_fun


Flatten = Flatten()


def Identity():
  """The identity layer."""
  return (lambda rng, input_shape: (input_shape, ())), (lambda params, inputs, **kw: inputs)


Identity = Identity()


def FanOut(num):
  """Repeat the input ``num`` times (a list), for a following ``parallel``."""
  init_fun = lambda rng, input_shape: ([input_shape] * num, ())
  apply_fun = lambda params, inputs, **kwargs: [inputs] * num
  return init_fun, apply_fun


def FanInSum():
  """Sum a list of inputs."""
  init_fun = lambda rng, input_shape: (input_shape[0], ())
  apply_fun = lambda params, inputs, **kwargs: sum(inputs)
  return init_fun, apply_fun


FanInSum = FanInSum()


def FanInConcat(axis=-1):
  """Concatenate a list of inputs along ``axis``."""
  def init_fun(rng, input_shape):
    ax = axis % len(input_shape[0])
    size = sum(shape[ax] for shape in input_shape)
    first = tuple(input_shape[0])
    return first[:ax] + (size,) + first[ax + 1:], ()

  def apply_fun(params, inputs, **kwargs):
    return jnp.concatenate(inputs, axis)
  return init_fun, apply_fun


def Dropout(rate, mode="train"):
  """Dropout (in ``mode='train'``): each element is kept with probability ``rate`` and scaled
  by ``1/rate`` (``rate`` is the keep probability, as in JAX's stax); ``apply_fun`` needs
  ``rng=``."""
  def init_fun(rng, input_shape):
    return input_shape, ()

  def apply_fun(params, inputs, **kwargs):
    rng = kwargs.get("rng", None)
    if rng is None:
      raise ValueError(
          "Dropout layer requires apply_fun to be called with a PRNG key argument. That is, "
          "instead of `apply_fun(params, inputs)`, call it like `apply_fun(params, inputs, "
          "rng)` where `rng` is a PRNG key (e.g. from `ourjax.random.key`).")
    if mode == "train":
      keep = random.bernoulli(rng, rate, inputs.shape)
      return jnp.where(keep, inputs / rate, 0)
    return inputs
  return init_fun, apply_fun


def serial(*layers):
  """Compose layers in sequence; params are a list, one entry per layer."""
  nlayers = len(layers)
  init_funs, apply_funs = zip(*layers) if layers else ((), ())

  def init_fun(rng, input_shape):
    params = []
    for init in init_funs:
      rng, layer_rng = random.split(rng)
      input_shape, param = init(layer_rng, input_shape)
      params.append(param)
    return input_shape, params

  def apply_fun(params, inputs, **kwargs):
    rng = kwargs.pop("rng", None)
    rngs = random.split(rng, nlayers) if rng is not None else (None,) * nlayers
    for fun, param, r in zip(apply_funs, params, rngs):
      inputs = fun(param, inputs, rng=r, **kwargs)
    return inputs
  return init_fun, apply_fun


def parallel(*layers):
  """Apply layers side by side to a sequence of inputs (one input per layer)."""
  nlayers = len(layers)
  init_funs, apply_funs = zip(*layers) if layers else ((), ())

  def init_fun(rng, input_shape):
    rngs = random.split(rng, nlayers)
    return zip(*[init(r, shape) for init, r, shape in zip(init_funs, rngs, input_shape)])

  def apply_fun(params, inputs, **kwargs):
    rng = kwargs.pop("rng", None)
    rngs = random.split(rng, nlayers) if rng is not None else (None,) * nlayers
    return [f(p, x, rng=r, **kwargs) for f, p, x, r in zip(apply_funs, params, inputs, rngs)]
  return init_fun, apply_fun


def shape_dependent(make_layer):
  """A layer built from the input shape: ``make_layer(input_shape) -> (init_fun, apply_fun)``."""
  def init_fun(rng, input_shape):
    return make_layer(input_shape)[0](rng, input_shape)

  def apply_fun(params, inputs, **kwargs):
    return make_layer(inputs.shape)[1](params, inputs, **kwargs)
  return init_fun, apply_fun
