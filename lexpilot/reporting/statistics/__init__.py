"""Statistics across runs and models: the bootstrap over cases, the paired randomization test, rankings with Holm and letters, power, consistency and judge noise."""
