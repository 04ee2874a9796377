"""Train a multilayer perceptron on handwritten digits with ourjax.

The data set is scikit-learn's ``load_digits`` (1797 8x8 images, shipped with the package, no
download).  The model is a two-hidden-layer MLP; each training step is one compiled function
(``@ourjax.jit``) that computes the loss and its gradient with ``ourjax.value_and_grad`` and
applies an Adam update.  Progress is one ``\\r``-updated line per epoch; the test accuracy is
printed at the end.

    python examples/mlp_classifier.py             # 10 epochs, about 98% test accuracy
    python examples/mlp_classifier.py --small     # a quick run (CI)
    python examples/mlp_classifier.py --epochs 50 --hidden 256

Without scikit-learn the script says so and trains on a synthetic 10-class problem instead.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import ourjax
import ourjax.numpy as jnp
from ourjax import nn, random
from ourjax.example_libraries import optimizers


# ---------------------------------------------------------------------------------------------
# Data


def synthetic_digits(n: int = 1800, seed: int = 0):
  """Ten Gaussian clusters in 64 dimensions, shaped like the digits data (features in
  [0, 16]); used when scikit-learn is not installed."""
  rng = np.random.default_rng(seed)
  centers = rng.uniform(0, 16, size=(10, 64))
  y = rng.integers(0, 10, size=n)
  x = np.clip(centers[y] + rng.normal(0, 4.0, size=(n, 64)), 0, 16)
  return x.astype(np.float32), y.astype(np.int32)


def load_data(seed: int = 0, test_fraction: float = 0.2, synthetic: bool = False):
  """(x_train, y_train, x_test, y_test, name): features standardised with the training
  statistics."""
  name = "scikit-learn digits"
  if synthetic:
    x, y = synthetic_digits(seed=seed)
    name = "synthetic digits"
  else:
    try:
      from sklearn.datasets import load_digits
    except ImportError:
      print("scikit-learn is not installed (pip install 'ourjax[examples]' or "
            "scikit-learn): training on a synthetic 10-class data set instead.")
      x, y = synthetic_digits(seed=seed)
      name = "synthetic digits"
    else:
      digits = load_digits()
      x, y = digits.data.astype(np.float32), digits.target.astype(np.int32)
  order = np.random.default_rng(seed).permutation(len(x))
  x, y = x[order], y[order]
  n_test = int(len(x) * test_fraction)
  x_train, y_train, x_test, y_test = x[n_test:], y[n_test:], x[:n_test], y[:n_test]
  mean, std = x_train.mean(0), x_train.std(0) + 1e-3
  return ((x_train - mean) / std, y_train, (x_test - mean) / std, y_test, name)


# ---------------------------------------------------------------------------------------------
# Model


def init_mlp(key, sizes):
  """[(W, b), ...] for layer sizes ``sizes`` (He-normal weights, zero biases)."""
  params = []
  keys = random.split(key, len(sizes) - 1)
  for k, (n_in, n_out) in zip(keys, zip(sizes[:-1], sizes[1:])):
    w = nn.initializers.he_normal()(k, (n_in, n_out))
    params.append((w, jnp.zeros((n_out,))))
  return params


def predict(params, x):
  """Logits of the MLP (ReLU hidden layers)."""
  for w, b in params[:-1]:
    x = nn.relu(x @ w + b)
  w, b = params[-1]
  return x @ w + b


def loss_fn(params, x, y, weight_decay=1e-4):
  """Mean cross-entropy plus a little L2 weight decay."""
  logits = predict(params, x)
  log_probs = nn.log_softmax(logits)
  nll = -jnp.mean(jnp.sum(nn.one_hot(y, 10) * log_probs, axis=-1))
  l2 = sum(jnp.sum(w * w) for w, _ in params)
  return nll + weight_decay * l2


@ourjax.jit
def accuracy(params, x, y):
  return jnp.mean(jnp.argmax(predict(params, x), axis=-1) == y)


def progress_bar(epoch, epochs, done, total, loss, width=24):
  filled = int(width * done / total)
  bar = "#" * filled + "." * (width - filled)
  return f"\repoch {epoch:3d}/{epochs} [{bar}] loss {loss:.4f}"


# ---------------------------------------------------------------------------------------------
# Training


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--epochs", type=int, default=10)
  parser.add_argument("--batch-size", type=int, default=64)
  parser.add_argument("--hidden", type=int, default=128)
  parser.add_argument("--lr", type=float, default=2e-3)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--small", action="store_true",
                      help="a quick run for CI: 3 epochs of a narrower network")
  parser.add_argument("--synthetic", action="store_true",
                      help="use the synthetic data set even when scikit-learn is present")
  parser.add_argument("--quiet", action="store_true", help="print only the final result")
  args = parser.parse_args(argv)
  if args.small:
    args.epochs = min(args.epochs, 3)
    args.hidden = min(args.hidden, 64)

  out = sys.stdout
  x_train, y_train, x_test, y_test, name = load_data(args.seed, synthetic=args.synthetic)
  if not args.quiet:
    print(f"ourjax {ourjax.__version__} on {ourjax.default_backend()}: MLP "
          f"64-{args.hidden}-{args.hidden}-10 on {name} ({len(x_train)} train / "
          f"{len(x_test)} test images)")

  key = random.PRNGKey(args.seed)
  init_key, shuffle_key = random.split(key)
  params = init_mlp(init_key, [x_train.shape[1], args.hidden, args.hidden, 10])
  opt_init, opt_update, get_params = optimizers.adam(
      optimizers.exponential_decay(args.lr, decay_steps=1000, decay_rate=0.5))
  opt_state = opt_init(params)

  @ourjax.jit
  def train_step(step, opt_state, x, y):
    loss, grads = ourjax.value_and_grad(loss_fn)(get_params(opt_state), x, y)
    return opt_update(step, grads, opt_state), loss

  n_batches = len(x_train) // args.batch_size  # fixed batch shape: one compilation
  losses, step = [], 0
  start = time.perf_counter()
  for epoch in range(1, args.epochs + 1):
    order = np.asarray(random.permutation(random.fold_in(shuffle_key, epoch), len(x_train)))
    epoch_loss = 0.0
    for b in range(n_batches):
      idx = order[b * args.batch_size:(b + 1) * args.batch_size]
      opt_state, loss = train_step(step, opt_state, x_train[idx], y_train[idx])
      step += 1
      epoch_loss += float(loss)
      if not args.quiet and (b % 4 == 0 or b == n_batches - 1):
        out.write(progress_bar(epoch, args.epochs, b + 1, n_batches, epoch_loss / (b + 1)))
        out.flush()
    losses.append(epoch_loss / n_batches)
    if not args.quiet:
      params = get_params(opt_state)
      test_acc = float(accuracy(params, x_test, y_test))
      out.write(progress_bar(epoch, args.epochs, n_batches, n_batches, losses[-1])
                + f"  test acc {test_acc:6.2%}  {time.perf_counter() - start:5.1f}s\n")
      out.flush()
  seconds = time.perf_counter() - start

  params = get_params(opt_state)
  train_acc = float(accuracy(params, x_train, y_train))
  test_acc = float(accuracy(params, x_test, y_test))
  print(f"train accuracy {train_acc:.2%}, test accuracy {test_acc:.2%} "
        f"({args.epochs} epochs, {step} steps, {seconds:.1f}s)")
  return {"losses": losses, "train_accuracy": train_acc, "test_accuracy": test_acc,
          "seconds": seconds, "data": name}


if __name__ == "__main__":
  main()
