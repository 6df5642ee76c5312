"""Scoring a run: its records read and checked, every task's metrics, the runs grouped; the cache of scored runs."""
