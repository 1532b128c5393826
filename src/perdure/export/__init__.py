"""Other systems' formats for a perdure job spec: `perdure export k8s` (JobSet + Kueue).

Translation is pure (spec in, documents and the gaps out); files are read and written by the
CLI only.
"""
