"""The scripted provider: an OpenAI-compatible server on 127.0.0.1 whose canned replies play every role of every
stage, for trying the harness without a provider, for the tests and for the benchmarks (`python -m lexpilot.scripted
--port P`). It reads the benchmark's prompts and nothing else of the package, and no stage imports it."""
