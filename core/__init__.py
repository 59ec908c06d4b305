"""The shared core: machinery every app uses and no app owns (see docs/architecture.md).

It imports no app: apps register into its registries from their AppConfig.ready()."""
