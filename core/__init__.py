"""The shared core: machinery every app uses and no app owns (docs/architecture.md, Layers).

It imports no app: apps register into its registries from their AppConfig.ready()."""
