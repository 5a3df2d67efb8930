"""The local runtime of the CLIs: Beam's FnApiRunner offline, its SDK worker processes (forked
warm from one server), their logs, buffers and deaths, and the run's signals (docs/architecture.md)."""
