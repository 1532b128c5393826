"""S3 for checkpoints and datasets: retried calls, verified uploads, parallel ranged reads.

``pip install 'perdure[s3]'`` brings s3fs; credentials and the endpoint come from the ordinary
AWS chain. Internal: users name ``s3://bucket/prefix`` URLs and never import this package.
"""
