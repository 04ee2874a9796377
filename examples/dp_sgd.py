"""Differentially private SGD (Abadi et al., 2016) on the digits data, with ourjax.

Per-example gradients come from ``ourjax.vmap(ourjax.grad(loss))``: one compiled program, no
Python loop over the batch.  Each example's gradient is clipped to L2 norm ``--clip``, the
clipped gradients are summed, Gaussian noise of standard deviation ``--noise * --clip`` (drawn
with ``ourjax.random``) is added, and the average updates the weights of a softmax-regression
model.  The script prints the loss curve and the test accuracy, next to the same model trained
without privacy for comparison.

    python examples/dp_sgd.py
    python examples/dp_sgd.py --noise 0.5 --clip 2 --epochs 20
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import ourjax
import ourjax.numpy as jnp
from ourjax import nn, random
from ourjax.tree_util import tree_map

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mlp_classifier import load_data  # noqa: E402


def init_params(key, n_in, n_out):
  return {"w": 0.01 * random.normal(key, (n_in, n_out)), "b": jnp.zeros((n_out,))}


def loss_fn(params, x, y):
  """Cross-entropy of softmax regression; works for one example or a batch."""
  logits = x @ params["w"] + params["b"]
  return -jnp.mean(jnp.sum(nn.one_hot(y, 10) * nn.log_softmax(logits), axis=-1))


def clip_by_norm(grads, max_norm):
  """Scale one example's gradient pytree down to L2 norm at most ``max_norm``."""
  norm = jnp.sqrt(sum(jnp.sum(g * g) for g in ourjax.tree_util.tree_leaves(grads)))
  scale = jnp.minimum(1.0, max_norm / (norm + 1e-12))
  return tree_map(lambda g: g * scale, grads)


def make_dp_step(lr, clip, noise):
  @ourjax.jit
  def dp_step(params, x, y, key):
    # one gradient per example: (batch, ...) leaves
    per_example = ourjax.vmap(ourjax.grad(loss_fn), in_axes=(None, 0, 0))(params, x, y)
    clipped = ourjax.vmap(lambda g: clip_by_norm(g, clip))(per_example)
    summed = tree_map(lambda g: jnp.sum(g, axis=0), clipped)
    leaves, treedef = ourjax.tree_util.tree_flatten(summed)
    keys = random.split(key, len(leaves))
    noisy = [g + noise * clip * random.normal(k, g.shape) for g, k in
             zip(leaves, [keys[i] for i in range(len(leaves))])]
    noisy = ourjax.tree_util.tree_unflatten(treedef, noisy)
    batch = x.shape[0]
    return tree_map(lambda p, g: p - lr * g / batch, params, noisy)
  return dp_step


def make_sgd_step(lr):
  @ourjax.jit
  def sgd_step(params, x, y):
    grads = ourjax.grad(loss_fn)(params, x, y)
    return tree_map(lambda p, g: p - lr * g, params, grads)
  return sgd_step


@ourjax.jit
def accuracy(params, x, y):
  return jnp.mean(jnp.argmax(x @ params["w"] + params["b"], axis=-1) == y)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--epochs", type=int, default=10)
  parser.add_argument("--batch-size", type=int, default=64)
  parser.add_argument("--lr", type=float, default=0.5)
  parser.add_argument("--clip", type=float, default=1.0, help="per-example L2 clipping norm")
  parser.add_argument("--noise", type=float, default=1.0,
                      help="noise multiplier (noise std = noise * clip)")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--small", action="store_true", help="a quick run (CI)")
  parser.add_argument("--synthetic", action="store_true")
  args = parser.parse_args(argv)
  if args.small:
    args.epochs = min(args.epochs, 3)

  x_train, y_train, x_test, y_test, name = load_data(args.seed, synthetic=args.synthetic)
  n_batches = len(x_train) // args.batch_size
  print(f"DP-SGD on {name}: clip {args.clip}, noise multiplier {args.noise}, batch "
        f"{args.batch_size}, lr {args.lr}")

  key = random.PRNGKey(args.seed)
  init_key, data_key, noise_key = random.split(key, 3)
  dp_params = init_params(init_key, x_train.shape[1], 10)
  sgd_params = dp_params
  dp_step, sgd_step = make_dp_step(args.lr, args.clip, args.noise), make_sgd_step(args.lr)

  losses = []
  start = time.perf_counter()
  step = 0
  for epoch in range(1, args.epochs + 1):
    order = np.asarray(random.permutation(random.fold_in(data_key, epoch), len(x_train)))
    for b in range(n_batches):
      idx = order[b * args.batch_size:(b + 1) * args.batch_size]
      xb, yb = x_train[idx], y_train[idx]
      dp_params = dp_step(dp_params, xb, yb, random.fold_in(noise_key, step))
      sgd_params = sgd_step(sgd_params, xb, yb)
      step += 1
    loss = float(loss_fn(dp_params, x_train, y_train))
    losses.append(loss)
    print(f"epoch {epoch:3d}  private loss {loss:.4f}  non-private loss "
          f"{float(loss_fn(sgd_params, x_train, y_train)):.4f}  "
          f"({time.perf_counter() - start:.1f}s)")
  dp_acc = float(accuracy(dp_params, x_test, y_test))
  sgd_acc = float(accuracy(sgd_params, x_test, y_test))
  print(f"test accuracy: DP-SGD {dp_acc:.2%}, plain SGD {sgd_acc:.2%}")
  return {"losses": losses, "dp_accuracy": dp_acc, "sgd_accuracy": sgd_acc,
          "initial_loss": float(np.log(10.0))}


if __name__ == "__main__":
  main()
