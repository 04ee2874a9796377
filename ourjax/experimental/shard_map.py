"""``jax.experimental.shard_map.shard_map`` (the same function as ``ourjax.shard_map``)."""
from ourjax.interpreters.shard_map import shard_map  # noqa: F401
