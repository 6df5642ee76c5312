"""export_results.py's package: a run's cases as instances (instances.py), what a run says of its protocol
(provenance.py), the Every Eval Ever records (eee.py), the Inspect logs (inspect_logs.py), the files written
atomically and only when changed (writing.py), the command (command.py) and the check of an export (verify.py)."""
