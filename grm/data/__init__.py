"""Data for training and evaluation: prompt sets, labelled evaluation items, builtin generated sets.

One loader (``grm.data.sources.load_rows``) serves both, so a pipeline's prompts and ``grm eval``'s
items accept the same files and fail with the same ``DataError`` naming the source and row.
"""
