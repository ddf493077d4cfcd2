"""A fake Kubernetes API server with a simulated control plane, for tests (see cluster.py)."""
