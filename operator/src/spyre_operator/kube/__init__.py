"""The Kubernetes client the operator talks through, its watches of the children and the
stores they fill, which the reconciles read instead of GETs."""
