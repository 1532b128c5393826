"""perdure's data pipeline: batches that resume exactly on any world size, shard streams and
a local cache of slow storage.
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
