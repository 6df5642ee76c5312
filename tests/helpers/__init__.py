"""What several test files share: the project's paths, the sample's cases, a harness that runs stages against the
scripted provider, and the provider's scripted replies, runs and grids the tests build on."""
