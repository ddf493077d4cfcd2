"""A fake of the Google TPU v2 and Compute v1 REST APIs, for the real gcloud, over real test hosts.

    with FakeGcp(host_network.hosts) as gcp:        # hosts: tests/hosts/netns.py SshHost objects
        env = gcp.gcloud_env(tmp_path / "home")     # run `gcloud ...` with env=env
        gcp.set_quota("europe-west4-a", tpu_chips=0)
        gcp.set_capacity("europe-west4-b", tpu_chips=0)
        gcp.preempt("my-slice")
        gcp.fail_next("unavailable", method="POST", path=r"/nodes$")
        gcp.nodes(), gcp.instances(), gcp.calls

What it serves (as gcloud calls it; everything else is 404): TPU `projects.locations.nodes` create
(`POST .../nodes?nodeId=`), get, list, delete, `PATCH ?updateMask=metadata|labels|description`,
`:getGuestAttributes`, and `projects.locations.operations` get; Compute instances insert, get, list,
aggregated list, delete, setMetadata, setLabels, zones get/list, zone and global operations (GET and
`POST .../wait`), project get and setCommonInstanceMetadata, and the batch endpoint
(`POST /batch/compute/v1`, which gcloud uses for `instances list --zones=A,B`). Long-running
operations finish `operation_delay` seconds (default 0.3) after they start; error bodies have
Google's shapes.

How gcloud reacts (worth knowing when matching its stderr): it retries a 503 from the TPU API
itself, 5 tries over about 30 s, before printing `HttpError accessing <URL>: response: <{...
'status': 503}>, content <{... "status": "UNAVAILABLE"}>`; Compute's 503 is printed at once as
`Could not fetch resource:\n - The service is currently unavailable.`, except in an aggregated
list, which exits 0 with `WARNING: Some requests did not succeed.` and lists what it got.

Hosts: the fake is given a pool of machines (each an sshd with its own `authorized_keys`). A TPU
node takes `tpu_topology(acceleratorType).hosts` of them (v4-8 and v5litepod-8: 1, v4-16: 2,
v5litepod-16: 4), a VM one; their addresses are the node's `networkEndpoints[].ipAddress` (and
`accessConfig.externalIp`) and the VM's `networkIP` (and `natIP`). Deleting returns them wiped:
processes stopped, private directories emptied, original keys back. The `ssh-keys` of the node's or
VM's metadata and of the project's common metadata (unless `block-project-ssh-keys`) are written to
the hosts' `authorized_keys`, so `gcloud compute tpus tpu-vm ssh` and `gcloud compute ssh` reach the
real sshd. Pass `--strict-host-key-checking=no` (gcloud pins host keys per node id and worker, and
the same test host serves many nodes over a session); no `--internal-ip` is needed because every
node and VM created with external access gets the host's address as its external address too (with
`--internal-ip`, gcloud_env's CLOUDSDK_SSH_VERIFY_INTERNAL_IP=false keeps gcloud from probing the
VM's metadata server first).

Test controls (stable API; every one takes the fake's lock):
- `gcloud_env(home) -> dict[str, str]`: the whole environment for a gcloud subprocess: temporary
  HOME and CLOUDSDK_CONFIG, access token, project, endpoint overrides, no prompts, no traffic
  anywhere else.
- `set_quota(zone, tpu_chips=None, instances=None)`: over quota, a TPU create answers HTTP 429
  RESOURCE_EXHAUSTED "Quota limit '<metric>' has been exceeded. Limit: N in zone Z." and an
  instance insert 403 quotaExceeded "Quota 'INSTANCES' exceeded.  Limit: N.0 in region R.".
- `set_capacity(zone, tpu_chips=None, instances=None)`: over capacity (or when the pool has too few
  free hosts) the create is accepted and its operation fails: TPU code 8 'There is no more capacity
  in the zone "Z"; ...', Compute ZONE_RESOURCE_POOL_EXHAUSTED; the node or VM disappears.
- `preempt(name, zone=None)`: a node turns PREEMPTED (a VM TERMINATED) and every process its hosts
  run, apart from their sshd (so only what was started through SSH), is killed with SIGKILL; the
  links stay up and the hosts stay the node's until it is deleted.
- `fail_next(kind, method=None, path=None, times=1)`: the next matching requests (method, regex on
  the URL path) fail with "permission_denied" (403 PERMISSION_DENIED naming the IAM permission of
  the route) or "unavailable" (503 UNAVAILABLE).
- Inspection: `nodes()`, `node(name)`, `instances()`, `instance(name)` (records with `state` /
  `status`, `hosts` / `host`, `labels`, `metadata`, `history` of (state, reason)), `free_hosts`,
  `calls` (every request as (method, path without query); a batch request's parts one by one).
- `operation_delay` (attribute) can be changed at any time; it applies to operations started later.
"""

from fakes.gcp.fake import DEFAULT_PROJECT, DEFAULT_ZONES, FakeGcp, ZoneLimits

__all__ = ["DEFAULT_PROJECT", "DEFAULT_ZONES", "FakeGcp", "ZoneLimits"]
