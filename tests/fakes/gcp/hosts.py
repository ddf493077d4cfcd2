"""The machines behind the fake's nodes and VMs: a pool of real test hosts, each with its own sshd.

A node takes `tpu_topology(accelerator).hosts` hosts from the pool and a VM takes one; deleting
returns them, wiped (processes stopped, private directories emptied), as a new VM would be fresh.
SSH keys that gcloud puts in metadata (`ssh-keys`, one `user:KEY` per line) are written to the
`authorized_keys` the host's sshd reads, after the keys the host accepted before the fake took it.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Protocol

import psutil

# Metadata keys gcloud and the guest agent use for SSH access.
SSH_KEYS = "ssh-keys"
LEGACY_SSH_KEYS = "sshKeys"
BLOCK_PROJECT_SSH_KEYS = "block-project-ssh-keys"


class Machine(Protocol):
    """What the fake needs of a test host (tests/hosts/netns.py's SshHost is one)."""

    name: str
    address: str

    @property
    def authorized_keys(self) -> Path: ...

    @property
    def host_public_key(self) -> str: ...

    def processes(self) -> list[psutil.Process]: ...

    def wipe(self) -> None: ...


def authorized_key_lines(metadata_value: str) -> list[str]:
    """The public keys of an `ssh-keys` value: each `user:ssh-ed25519 AAAA... comment` line
    without its user (the test hosts have one account, whatever name the key was made for)."""
    keys = []
    for line in metadata_value.splitlines():
        line = line.strip()
        if not line:
            continue
        user, separator, key = line.partition(":")
        keys.append(key.strip() if separator and " " not in user else line)
    return keys


def instance_keys(project_metadata: dict[str, str], own_metadata: dict[str, str]) -> list[str]:
    """The keys a VM accepts: its own, plus the project's unless it blocks them (as the guest agent)."""
    keys = []
    for source in (own_metadata.get(SSH_KEYS, ""), own_metadata.get(LEGACY_SSH_KEYS, "")):
        keys.extend(authorized_key_lines(source))
    if own_metadata.get(BLOCK_PROJECT_SSH_KEYS, "").lower() != "true":
        for source in (project_metadata.get(SSH_KEYS, ""), project_metadata.get(LEGACY_SSH_KEYS, "")):
            keys.extend(authorized_key_lines(source))
    return keys


class HostPool:
    """Free and taken hosts (the caller serialises access with the fake's lock)."""

    def __init__(self, machines: Sequence[Machine]) -> None:
        self._free: list[Machine] = list(machines)
        self._all: list[Machine] = list(machines)
        self._base_keys = {m.name: m.authorized_keys.read_text() for m in machines}

    @property
    def free_count(self) -> int:
        return len(self._free)

    def take(self, count: int) -> list[Machine] | None:
        """`count` free hosts, lowest address first, or None when fewer are free."""
        if count > len(self._free):
            return None
        taken, self._free = self._free[:count], self._free[count:]
        return taken

    def give_back(self, machines: Iterable[Machine]) -> None:
        for machine in machines:
            machine.wipe()
            machine.authorized_keys.write_text(self._base_keys[machine.name])
            self._free.append(machine)
        order = {m.name: index for index, m in enumerate(self._all)}
        self._free.sort(key=lambda m: order[m.name])

    def authorize(self, machine: Machine, keys: Sequence[str]) -> None:
        """The host accepts its original keys plus `keys` (replacing what gcloud added before)."""
        base = self._base_keys[machine.name]
        if base and not base.endswith("\n"):
            base += "\n"
        machine.authorized_keys.write_text(base + "".join(f"{key}\n" for key in keys))

    def restore(self) -> None:
        """Every host's original keys (when the fake stops)."""
        for machine in self._all:
            machine.authorized_keys.write_text(self._base_keys[machine.name])


def power_off(machine: Machine) -> None:
    """What a preemption does to a VM's software: every process it runs dies at once (SIGKILL).
    Only processes started through the host's sshd are touched, never the sshd itself."""
    processes = machine.processes()
    for process in processes:
        try:
            process.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            continue
    psutil.wait_procs(processes, timeout=10.0)
