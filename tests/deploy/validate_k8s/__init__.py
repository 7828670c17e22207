"""The checks of tests/deploy/validate_k8s.py, by subject: objects (the render, its pod templates, quantities,
moe-worker's flags), schemas (our own schemas of the custom resources, and their checker), pods, workers,
kueue, monitoring, tls (the controller's TLS and who trusts it), netpol, ha (the controller's store, its
standbys and their etcd), requires (what a render must contain)."""
