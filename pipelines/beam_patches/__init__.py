"""Patches of Apache Beam 2.77's internals, each installed by pipelines.runtime.runner and each
checking at install that what it replaces is still there (docs/architecture.md, "Beam upgrade
checklist")."""
