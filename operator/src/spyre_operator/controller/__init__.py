"""The controller machinery around the reconcile: the settings, the `run` and
`check-install` commands, the work queue and what triggers it, the Events, the metrics,
and the wiring of all of it into kopf."""
