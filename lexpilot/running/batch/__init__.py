"""Batch mode: the cycles, the provider's batch API, collecting, replay, a run's batch state, status, the ledger."""
