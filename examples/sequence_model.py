"""A small recurrent network, unrolled with ``lax.scan``, learns to recall its input.

The task: a stream of random numbers comes in, one per step; at every step the network must
output the number it saw ``--delay`` steps earlier (the first ``delay`` outputs are not
scored).  Predicting 0 gives mean squared error 1 (the inputs are standard normal); a network
that learned to hold values in its state gets close to 0.

The RNN is an Elman cell ``h' = tanh(x W_x + h W_h + b)`` with a linear read-out, scanned over
time with ``ourjax.lax.scan`` (one loop in the compiled program, whatever the sequence length),
batched with ``ourjax.vmap`` and trained by backpropagation through time with
``ourjax.value_and_grad`` and Adam.

    python examples/sequence_model.py
    python examples/sequence_model.py --delay 3 --steps 600
"""
from __future__ import annotations

import argparse
import time

import ourjax
import ourjax.numpy as jnp
from ourjax import lax, nn, random
from ourjax.example_libraries import optimizers


def init_rnn(key, hidden):
  k1, k2, k3 = random.split(key, 3)
  return {
      "w_x": nn.initializers.lecun_normal()(k1, (1, hidden)),
      "w_h": nn.initializers.orthogonal()(k2, (hidden, hidden)),
      "b": jnp.zeros((hidden,)),
      "w_out": nn.initializers.lecun_normal()(k3, (hidden, 1)),
      "b_out": jnp.zeros((1,)),
  }


def run_rnn(params, xs):
  """Outputs for one sequence ``xs`` (shape ``(T,)``)."""
  hidden = params["b"].shape[0]

  def cell(h, x):
    h = jnp.tanh(x * params["w_x"][0] + h @ params["w_h"] + params["b"])
    y = h @ params["w_out"][:, 0] + params["b_out"][0]
    return h, y

  _, ys = lax.scan(cell, jnp.zeros((hidden,)), xs)
  return ys


def make_batch(key, batch, length, delay):
  xs = random.normal(key, (batch, length))
  targets = jnp.concatenate([jnp.zeros((batch, delay)), xs[:, :length - delay]], axis=1)
  return xs, targets


def loss_fn(params, xs, targets, delay):
  preds = ourjax.vmap(run_rnn, in_axes=(None, 0))(params, xs)
  return jnp.mean((preds[:, delay:] - targets[:, delay:]) ** 2)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--steps", type=int, default=400)
  parser.add_argument("--delay", type=int, default=2)
  parser.add_argument("--length", type=int, default=20)
  parser.add_argument("--batch-size", type=int, default=32)
  parser.add_argument("--hidden", type=int, default=32)
  parser.add_argument("--lr", type=float, default=1e-2)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--small", action="store_true", help="a quick run (CI)")
  args = parser.parse_args(argv)
  if args.small:
    args.steps = min(args.steps, 150)

  key = random.PRNGKey(args.seed)
  init_key, data_key = random.split(key)
  params = init_rnn(init_key, args.hidden)
  opt_init, opt_update, get_params = optimizers.adam(args.lr)
  opt_state = opt_init(params)
  delay = args.delay

  @ourjax.jit
  def train_step(i, opt_state, key):
    xs, targets = make_batch(key, args.batch_size, args.length, delay)
    loss, grads = ourjax.value_and_grad(loss_fn)(get_params(opt_state), xs, targets, delay)
    return opt_update(i, grads, opt_state), loss

  print(f"Elman RNN ({args.hidden} units) recalling the input from {delay} steps back, "
        f"sequences of {args.length}")
  losses = []
  start = time.perf_counter()
  report = max(1, args.steps // 10)
  for i in range(args.steps):
    opt_state, loss = train_step(i, opt_state, random.fold_in(data_key, i))
    losses.append(float(loss))
    if i % report == 0 or i == args.steps - 1:
      bar = "#" * int(30 * min(1.0, losses[-1]))
      print(f"step {i:5d}  mse {losses[-1]:.4f}  {bar}")
  xs, targets = make_batch(random.fold_in(data_key, -1), 256, args.length, delay)
  test_mse = float(loss_fn(get_params(opt_state), xs, targets, delay))
  print(f"held-out mse {test_mse:.4f} (predicting zero gives about 1.0); "
        f"{time.perf_counter() - start:.1f}s")
  return {"losses": losses, "test_mse": test_mse}


if __name__ == "__main__":
  main()
