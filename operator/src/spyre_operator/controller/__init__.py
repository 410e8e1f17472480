"""The controller machinery around the reconcile: settings, the `run` command."""
