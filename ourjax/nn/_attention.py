"""``nn.dot_product_attention``: softmax(Q K^T * scale + bias, masked) V over heads, with
grouped-query attention (fewer key/value heads than query heads), as a composition of jnp
operations (so it differentiates and batches like them).

Shapes: query [B, T, N, H] (or [T, N, H]), key and value [B, S, K, H] with N a multiple of K
(each key/value head repeated for its N/K query heads);
bias and mask broadcast to [B, N, T, S].  The logits are formed in at least float32 and the
softmax runs in float32; masked logits take a large finite negative value (so a fully masked
row averages all values instead of producing NaN); query rows past ``query_seq_lengths`` give
zeros."""
from __future__ import annotations

import numpy as np

from ourjax import dtypes, lax
from ourjax import numpy as jnp
from ourjax.config import internal_promotion


def _mask_value(dtype) -> np.ndarray:
  # finite in float32 as well, where the softmax runs
  big = min(float(jnp.finfo(dtype).max), float(np.finfo(np.float32).max))
  return np.asarray(-0.7 * big, dtype)


def _to_bnts(x, B, N, T, S, what):
  """``x`` broadcast to [B, N, T, S] (it must have rank 4, or 2/3 for its trailing dims)."""
  x = jnp.asarray(x)
  if x.ndim > 4:
    raise ValueError(f"dot_product_attention: {what} must have at most 4 dimensions, got shape "
                     f"{x.shape}")
  return jnp.broadcast_to(x, (B, N, T, S))


@internal_promotion     # (a composition of jnp ops relying on promotion)
def dot_product_attention(query, key, value, bias=None, mask=None, *, scale=None,
                          is_causal: bool = False, query_seq_lengths=None,
                          key_value_seq_lengths=None, local_window_size=None,
                          implementation=None, return_residual: bool = False):
  """Scaled dot-product attention; see the module docstring.  ``implementation`` may be None
  or ``'xla'`` (``'cudnn'`` raises: ourjax has no cuDNN).  With ``return_residual`` also the
  log-sum-exp of each query row's logits, [B, T, N] (not differentiated)."""
  if implementation not in (None, "xla"):
    raise ValueError(f"dot_product_attention: unsupported implementation {implementation!r} "
                     "(ourjax provides only the 'xla'-style composition)")
  query, key, value = jnp.asarray(query), jnp.asarray(key), jnp.asarray(value)
  unbatched = query.ndim == 3
  if unbatched:
    if key.ndim != 3 or value.ndim != 3:
      raise ValueError("dot_product_attention: query, key and value must all have rank 3 or "
                       f"all rank 4, got {query.shape}, {key.shape}, {value.shape}")
    query, key, value = query[None], key[None], value[None]
    for name in ("query_seq_lengths", "key_value_seq_lengths"):
      if locals()[name] is not None:
        raise ValueError(f"dot_product_attention: {name} needs a batch dimension")
  if query.ndim != 4 or key.ndim != 4 or value.ndim != 4:
    raise ValueError("dot_product_attention: query, key and value must have rank 4 (BTNH, "
                     f"BSKH, BSKH) or 3, got {query.shape}, {key.shape}, {value.shape}")
  if key.shape != value.shape:
    raise ValueError(f"dot_product_attention: key and value must have the same shape, got "
                     f"{key.shape} and {value.shape}")
  B, T, N, H = query.shape
  _, S, K, Hk = key.shape
  if key.shape[0] != B or Hk != H:
    raise ValueError(f"dot_product_attention: query {query.shape} and key {key.shape} must "
                     "agree on the batch and head dimensions")
  if K == 0 or N % K:
    raise ValueError(f"dot_product_attention: the number of query heads ({N}) must be a "
                     f"multiple of the number of key/value heads ({K})")
  G = N // K
  if scale is None:
    scale = 1.0 / np.sqrt(H)
  logits_dtype = dtypes.promote_types(query.dtype, np.float32)

  # query head n = k * G + g reads key/value head k: with grouped heads each key/value head is
  # repeated for its G query heads (a copy of k and v, small beside the [B, N, T, S] scores),
  # so that every form is the plain [B, N, T, S] products, which the GPU runs forward and
  # backward as fused attention kernels (the repeat's derivative sums each group's gradients)
  if G > 1:
    key, value = jnp.repeat(key, G, axis=2), jnp.repeat(value, G, axis=2)
  lg = (B, N, T, S)
  logits = jnp.einsum("btnh,bsnh->bnts", query, key, preferred_element_type=logits_dtype)
  logits = logits * jnp.asarray(scale, logits_dtype)
  if bias is not None:
    b5 = jnp.reshape(_to_bnts(bias, B, N, T, S, "bias"), lg)
    logits = (logits + b5).astype(logits_dtype)

  keep = None

  def both(a, b):
    return b if a is None else jnp.logical_and(a, b)

  def per_batch(x):       # [B, T or S] (the last dim at the given logits dim) -> logits rank
    return x[:, None]
  if mask is not None:
    mask = jnp.asarray(mask)
    if mask.dtype != np.bool_:
      raise ValueError(f"dot_product_attention: mask must be boolean, got {mask.dtype}")
    keep = both(keep, jnp.reshape(_to_bnts(mask, B, N, T, S, "mask"), lg))
  t_pos = jnp.arange(T)[:, None]
  s_pos = jnp.arange(S)[None, :]
  if is_causal:
    keep = both(keep, s_pos <= t_pos)
  if local_window_size is not None:
    left, right = ((local_window_size, local_window_size)
                   if isinstance(local_window_size, int) else local_window_size)
    keep = both(keep, (t_pos <= s_pos + left) & (t_pos >= s_pos - right))
  if query_seq_lengths is not None:
    qlen = jnp.asarray(query_seq_lengths)
    keep = both(keep, per_batch((jnp.arange(T)[None, :] < qlen[:, None])[:, :, None]))
  if key_value_seq_lengths is not None:
    kvlen = jnp.asarray(key_value_seq_lengths)
    keep = both(keep, per_batch((jnp.arange(S)[None, :] < kvlen[:, None])[:, None, :]))
  if keep is not None:
    logits = jnp.where(keep, logits, _mask_value(logits_dtype))

  from ourjax.nn import softmax
  logits32 = logits.astype(np.float32)
  # (nn.softmax, as JAX's implementation: its derivative rule is the one the GPU's fused
  # attention backward recognizes, lowering/passes/attention_grad.py)
  probs = softmax(logits32, axis=-1).astype(key.dtype)
  out = jnp.einsum("bnts,bsnh->btnh", probs, value)
  if query_seq_lengths is not None:
    live = jnp.arange(T)[None, :] < jnp.asarray(query_seq_lengths)[:, None]
    out = out * live[:, :, None, None].astype(out.dtype)
  if unbatched:
    out = out[0]
  if not return_residual:
    return out
  m = lax.stop_gradient(jnp.max(logits32, axis=-1, keepdims=True))
  denom = jnp.sum(jnp.exp(logits32 - m), axis=-1, keepdims=True)
  lse = (jnp.log(denom[..., 0]) + m[..., 0]).astype(key.dtype)      # [B, N, T]
  lse = jnp.transpose(lse, (0, 2, 1))
  lse = lax.stop_gradient(lse)
  return out, (lse[0] if unbatched else lse)
