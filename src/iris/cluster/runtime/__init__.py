"""Container runtimes: how a worker runs one task attempt (process, docker, containerd, kubernetes)."""
