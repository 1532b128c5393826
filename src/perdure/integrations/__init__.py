"""Adapters for training frameworks: perdure's guarantees for code that keeps its own loop.

`perdure.integrations.transformers` (the `hf` extra) and `perdure.integrations.lightning`
(the `lightning` extra). Each imports its framework, so import only the one you use. They
translate between the framework's words and perdure's runtime; the rules live in the runtime.
"""
