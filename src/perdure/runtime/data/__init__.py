"""perdure's data pipeline: exact resume on any world size, shard streams, a local file cache.

- `ElasticSampler`: batches whose order is a pure function of (seed, epoch) and whose state is
  one global cursor, so a resume on any world size consumes every sample once per epoch.
- `ElasticLoader`: a DataLoader (workers, prefetching, persistent workers) whose state counts
  the batches the training loop received, with per-batch seeds that replay after a resume.
- `ShardDataset`: an IterableDataset over shards that checkpoints completed shards, the
  current shard and the offset in it; `merge_shard_states` re-deals them on a new topology.
- `CachedVolume`: files from slow storage copied to a shared local cache on first use, with
  background prefetch and least-recently-used eviction under a free-space threshold.
"""

from perdure.runtime.data.cache import ENV_MIN_FREE_BYTES, CachedVolume
from perdure.runtime.data.loader import ElasticLoader
from perdure.runtime.data.sampler import Batch, ElasticSampler
from perdure.runtime.data.seeding import batch_seed, shard_seed, worker_seed
from perdure.runtime.data.shards import ShardDataset, merge_shard_states
from perdure.runtime.data.sources import FsspecSource, LocalSource, Source

__all__ = [
    "ENV_MIN_FREE_BYTES",
    "Batch",
    "CachedVolume",
    "ElasticLoader",
    "ElasticSampler",
    "FsspecSource",
    "LocalSource",
    "ShardDataset",
    "Source",
    "batch_seed",
    "merge_shard_states",
    "shard_seed",
    "worker_seed",
]
