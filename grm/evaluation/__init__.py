"""Batch evaluation of judges: ``grm eval`` (runner), metrics, report, ``grm rescore``."""
