"""The reconcile of one SpyreModel or SpyreCache: observe the cluster, decide (pure) what
to write and what status says, apply it."""
