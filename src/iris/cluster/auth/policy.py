"""Who may call what, as pure functions over (identity, method) and (identity, job owner).

Every ControllerService method not named below is a user call: open to users and admins, closed
to workers. Workers may only announce themselves; changing the cluster's machines and minting
tokens are for admins.
"""

from __future__ import annotations

from iris.cluster.auth.tokens import Identity, Role

# Callable without a token: Login exchanges a credential carried in its body.
OPEN_METHODS = frozenset({"Login"})
WORKER_METHODS = frozenset({"Register", "NotifyWorkerEvent"})
ADMIN_METHODS = frozenset({"CreateSlice", "TerminateSlice", "CreateToken"})

_WORKER_CALL_ROLES = frozenset({Role.WORKER, Role.ADMIN})
_ADMIN_CALL_ROLES = frozenset({Role.ADMIN})
_USER_CALL_ROLES = frozenset({Role.USER, Role.ADMIN})


def allowed_roles(method: str) -> frozenset[Role]:
    if method in WORKER_METHODS:
        return _WORKER_CALL_ROLES
    if method in ADMIN_METHODS:
        return _ADMIN_CALL_ROLES
    return _USER_CALL_ROLES


def refusal_for_call(identity: Identity, method: str) -> str | None:
    """Why `identity` may not call `method`, or None when it may."""
    roles = allowed_roles(method)
    if identity.role in roles:
        return None
    names = " or ".join(sorted(r.value for r in roles))
    return f"{method} needs the {names} role; {identity.user} has the {identity.role.value} role"


def refusal_for_job(identity: Identity, action: str, job_id: str, owner: str) -> str | None:
    """Why `identity` may not `action` the job (a job of `owner`'s tree), or None when it may.

    Jobs from before auth was turned on have no owner: only an admin may touch them.
    """
    if identity.role is Role.ADMIN or (owner and owner == identity.user):
        return None
    whose = f"user {owner}" if owner else "no recorded owner"
    return f"cannot {action} {job_id}: it belongs to {whose}, not to {identity.user} (only an admin may)"
