"""Functional optimizers over pytrees, with ``jax.example_libraries.optimizers``' interface.

An optimizer is a triple ``(init_fun, update_fun, get_params)``::

    opt_init, opt_update, get_params = optimizers.adam(step_size=1e-3)
    opt_state = opt_init(params)

    @ourjax.jit
    def step(i, opt_state, batch):
      g = ourjax.grad(loss)(get_params(opt_state), batch)
      return opt_update(i, g, opt_state)

``params`` may be any pytree of arrays; the state is a pytree too (``OptimizerState``), so it
passes through ``jit``.  ``step_size`` is a number or a schedule, a function of the step index
(``exponential_decay``, ``piecewise_constant``, ...).  The ``@optimizer`` decorator turns
per-array functions ``(init, update, get_params)`` into pytree ones.
"""
from __future__ import annotations

import functools
from collections import namedtuple
from typing import Any, Callable

import numpy as np

from ourjax import lax
from ourjax import numpy as jnp
from ourjax.tree_util import (register_pytree_node, tree_flatten, tree_leaves, tree_map,
                              tree_unflatten)

__all__ = [
    "OptimizerState", "Optimizer", "optimizer", "make_schedule", "constant",
    "exponential_decay", "inverse_time_decay", "polynomial_decay", "piecewise_constant", "sgd",
    "momentum", "nesterov", "adagrad", "rmsprop", "rmsprop_momentum", "adam", "adamax",
    "clip_grads", "l2_norm", "unpack_optimizer_state", "pack_optimizer_state",
]

Schedule = Callable[[int], float]

# The state of a pytree of parameters: one tuple of per-array states per leaf, plus the
# structure needed to rebuild the tree.  Only the arrays are pytree children (so jit and vmap
# see them); the tree definitions ride along as static data.
OptimizerState = namedtuple("OptimizerState", ["packed_state", "tree_def", "subtree_defs"])
register_pytree_node(
    OptimizerState,
    lambda s: ((s.packed_state,), (s.tree_def, s.subtree_defs)),
    lambda aux, children: OptimizerState(children[0], aux[0], aux[1]))


class Optimizer(namedtuple("Optimizer", ["init_fn", "update_fn", "params_fn"])):
  """``(init_fun, update_fun, get_params)``; unpacks like a tuple."""


def optimizer(opt_maker: Callable[..., tuple[Callable, Callable, Callable]]):
  """Decorator: lift an optimizer defined on single arrays to one on pytrees of arrays.

  ``opt_maker(*args)`` returns ``(init(x) -> state, update(i, g, state) -> state,
  get_params(state) -> x)`` for one array; ``state`` may itself be a pytree (a tuple of
  arrays, say).  The lifted functions apply them leaf by leaf."""

  @functools.wraps(opt_maker)
  def tree_opt_maker(*args, **kwargs):
    init, update, get_params = opt_maker(*args, **kwargs)

    @functools.wraps(init)
    def tree_init(x0_tree):
      x0_flat, tree = tree_flatten(x0_tree)
      initial_states = [init(x0) for x0 in x0_flat]
      states_flat, subtrees = zip(*map(tree_flatten, initial_states)) if x0_flat else ((), ())
      return OptimizerState(list(states_flat), tree, list(subtrees))

    @functools.wraps(update)
    def tree_update(i, grad_tree, opt_state):
      states_flat, tree, subtrees = opt_state
      grad_flat, tree2 = tree_flatten(grad_tree)
      if tree2 != tree:
        raise TypeError("optimizer update function was passed a gradient tree that did not "
                        "match the parameter tree structure with which it was initialized: "
                        f"parameter tree {tree} and grad tree {tree2}.")
      states = map(tree_unflatten, subtrees, states_flat)
      new_states = map(update, [i] * len(grad_flat), grad_flat, states)
      new_states_flat, subtrees2 = zip(*map(tree_flatten, new_states)) if grad_flat else ((), ())
      for s1, s2 in zip(subtrees, subtrees2):
        if s2 != s1:
          raise TypeError("optimizer update function produced an output structure that did "
                          f"not match its input structure: input {s1} and output {s2}.")
      return OptimizerState(list(new_states_flat), tree, subtrees)

    @functools.wraps(get_params)
    def tree_get_params(opt_state):
      states_flat, tree, subtrees = opt_state
      states = map(tree_unflatten, subtrees, states_flat)
      return tree_unflatten(tree, map(get_params, states))

    return Optimizer(tree_init, tree_update, tree_get_params)

  return tree_opt_maker


# ---------------------------------------------------------------------------------------------
# Schedules: functions of the step index i (an int or a traced integer)


def constant(step_size) -> Schedule:
  def schedule(i):
    return step_size
  return schedule


def exponential_decay(step_size, decay_steps, decay_rate) -> Schedule:
  """``step_size * decay_rate ** (i / decay_steps)``."""
  def schedule(i):
    return step_size * decay_rate ** (i / decay_steps)
  return schedule


def inverse_time_decay(step_size, decay_steps, decay_rate, staircase: bool = False) -> Schedule:
  """``step_size / (1 + decay_rate * i / decay_steps)`` (``floor`` of the ratio with
  ``staircase``)."""
  if staircase:
    def schedule(i):
      return step_size / (1 + decay_rate * jnp.floor(i / decay_steps))
  else:
    def schedule(i):
      return step_size / (1 + decay_rate * i / decay_steps)
  return schedule


def polynomial_decay(step_size, decay_steps, final_step_size, power=1.0) -> Schedule:
  """From ``step_size`` down to ``final_step_size`` over ``decay_steps`` steps, along
  ``(1 - i / decay_steps) ** power``; constant afterwards."""
  def schedule(step_num):
    step_num = jnp.minimum(step_num, decay_steps)
    step_mult = (1 - step_num / decay_steps) ** power
    return step_mult * (step_size - final_step_size) + final_step_size
  return schedule


def piecewise_constant(boundaries, values) -> Schedule:
  """``values[k]`` for ``boundaries[k-1] <= i < boundaries[k]`` (``len(values) ==
  len(boundaries) + 1``)."""
  boundaries = jnp.array(boundaries)
  values = jnp.array(values)
  if not boundaries.ndim == values.ndim == 1:
    raise ValueError("boundaries and values must be sequences")
  if not boundaries.shape[0] == values.shape[0] - 1:
    raise ValueError("boundaries length must be one shorter than values length")

  def schedule(i):
    k = jnp.sum(i >= boundaries)
    return lax.dynamic_index_in_dim(values, k, keepdims=False)
  return schedule


def make_schedule(scalar_or_schedule) -> Schedule:
  """A schedule from a schedule (returned as is) or a number (a constant schedule)."""
  if callable(scalar_or_schedule):
    return scalar_or_schedule
  if np.ndim(scalar_or_schedule) == 0:
    return constant(scalar_or_schedule)
  raise TypeError(type(scalar_or_schedule))


# ---------------------------------------------------------------------------------------------
# Optimizers (each defined on one array; @optimizer lifts them to pytrees)


@optimizer
def sgd(step_size):
  """Gradient descent: ``x - step_size(i) * g``."""
  step_size = make_schedule(step_size)

  def init(x0):
    return x0

  def update(i, g, x):
    return x - step_size(i) * g

  def get_params(x):
    return x

  return init, update, get_params


@optimizer
def momentum(step_size, mass: float):
  """Heavy-ball momentum: ``v = mass * v + g``, ``x = x - step_size(i) * v``."""
  step_size = make_schedule(step_size)

  def init(x0):
    return x0, jnp.zeros_like(x0)

  def update(i, g, state):
    x, velocity = state
    velocity = mass * velocity + g
    return x - step_size(i) * velocity, velocity

  def get_params(state):
    return state[0]

  return init, update, get_params


@optimizer
def nesterov(step_size, mass: float):
  """Nesterov momentum: ``v = mass * v + g``, ``x = x - step_size(i) * (mass * v + g)``."""
  step_size = make_schedule(step_size)

  def init(x0):
    return x0, jnp.zeros_like(x0)

  def update(i, g, state):
    x, velocity = state
    velocity = mass * velocity + g
    return x - step_size(i) * (mass * velocity + g), velocity

  def get_params(state):
    return state[0]

  return init, update, get_params


@optimizer
def adagrad(step_size, momentum=0.9):
  """Adagrad (with momentum on the normalised gradient, as JAX's example library)."""
  step_size = make_schedule(step_size)

  def init(x0):
    return x0, jnp.zeros_like(x0), jnp.zeros_like(x0)

  def update(i, g, state):
    x, g_sq, m = state
    g_sq = g_sq + jnp.square(g)
    g_sq_inv_sqrt = jnp.where(g_sq > 0, 1. / jnp.sqrt(g_sq), 0.0)
    m = (1. - momentum) * (g * g_sq_inv_sqrt) + momentum * m
    return x - step_size(i) * m, g_sq, m

  def get_params(state):
    return state[0]

  return init, update, get_params


@optimizer
def rmsprop(step_size, gamma=0.9, eps=1e-8):
  """RMSProp: a running mean of ``g**2`` normalises the step."""
  step_size = make_schedule(step_size)

  def init(x0):
    return x0, jnp.zeros_like(x0)

  def update(i, g, state):
    x, avg_sq_grad = state
    avg_sq_grad = avg_sq_grad * gamma + jnp.square(g) * (1. - gamma)
    return x - step_size(i) * g / jnp.sqrt(avg_sq_grad + eps), avg_sq_grad

  def get_params(state):
    return state[0]

  return init, update, get_params


@optimizer
def rmsprop_momentum(step_size, gamma=0.9, eps=1e-8, momentum=0.9):
  """RMSProp with momentum on the normalised step."""
  step_size = make_schedule(step_size)

  def init(x0):
    return x0, jnp.zeros_like(x0), jnp.zeros_like(x0)

  def update(i, g, state):
    x, avg_sq_grad, mom = state
    avg_sq_grad = avg_sq_grad * gamma + jnp.square(g) * (1. - gamma)
    mom = momentum * mom + step_size(i) * g / jnp.sqrt(avg_sq_grad + eps)
    return x - mom, avg_sq_grad, mom

  def get_params(state):
    return state[0]

  return init, update, get_params


@optimizer
def adam(step_size, b1=0.9, b2=0.999, eps=1e-8):
  """Adam (Kingma and Ba, 2015): bias-corrected running means of ``g`` and ``g**2``."""
  step_size = make_schedule(step_size)

  def init(x0):
    return x0, jnp.zeros_like(x0), jnp.zeros_like(x0)

  def update(i, g, state):
    x, m, v = state
    m = (1 - b1) * g + b1 * m
    v = (1 - b2) * jnp.square(g) + b2 * v
    mhat = m / (1 - jnp.asarray(b1, m.dtype) ** (i + 1))
    vhat = v / (1 - jnp.asarray(b2, m.dtype) ** (i + 1))
    return x - step_size(i) * mhat / (jnp.sqrt(vhat) + eps), m, v

  def get_params(state):
    return state[0]

  return init, update, get_params


@optimizer
def adamax(step_size, b1=0.9, b2=0.999, eps=1e-8):
  """AdaMax: Adam with the infinity norm in place of the second moment."""
  step_size = make_schedule(step_size)

  def init(x0):
    return x0, jnp.zeros_like(x0), jnp.zeros_like(x0)

  def update(i, g, state):
    x, m, u = state
    m = (1 - b1) * g + b1 * m
    u = jnp.maximum(b2 * u, jnp.abs(g))
    x = x - (step_size(i) / (1 - jnp.asarray(b1, m.dtype) ** (i + 1))) * m / (u + eps)
    return x, m, u

  def get_params(state):
    return state[0]

  return init, update, get_params


# ---------------------------------------------------------------------------------------------
# Utilities


def l2_norm(tree):
  """The Euclidean norm of all the leaves of ``tree`` together."""
  leaves = tree_leaves(tree)
  return jnp.sqrt(sum(jnp.vdot(x, x) for x in leaves))


def clip_grads(grad_tree, max_norm):
  """Scale ``grad_tree`` down so that its ``l2_norm`` is at most ``max_norm``."""
  norm = l2_norm(grad_tree)
  normalize = lambda g: jnp.where(norm < max_norm, g, g * (max_norm / norm))  # noqa: E731
  return tree_map(normalize, grad_tree)


JoinPoint = namedtuple("JoinPoint", ["subtree"])


def unpack_optimizer_state(opt_state: OptimizerState) -> Any:
  """An ``OptimizerState`` as a plain pytree (for saving), the inverse of
  ``pack_optimizer_state``."""
  states_flat, tree_def, subtree_defs = opt_state
  subtrees = map(tree_unflatten, subtree_defs, states_flat)
  sentinels = [JoinPoint(subtree) for subtree in subtrees]
  return tree_unflatten(tree_def, sentinels)


def pack_optimizer_state(marked_pytree) -> OptimizerState:
  """The ``OptimizerState`` of a pytree that ``unpack_optimizer_state`` produced."""
  sentinels, tree_def = tree_flatten(marked_pytree, is_leaf=lambda x: isinstance(x, JoinPoint))
  if not all(isinstance(s, JoinPoint) for s in sentinels):
    raise TypeError("pack_optimizer_state expects the pytree that unpack_optimizer_state "
                    "returned")
  subtrees = [s.subtree for s in sentinels]
  states_flat, subtree_defs = zip(*map(tree_flatten, subtrees)) if subtrees else ((), ())
  return OptimizerState(list(states_flat), tree_def, list(subtree_defs))
