"""The validating admission webhook: the validator's verdict at `kubectl apply`."""
