"""The shared core: machinery every app uses and no app owns (see docs/layers.md).

It imports no app: apps register into its registries from their AppConfig.ready()."""
