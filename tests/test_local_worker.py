"""A local cluster's forked workers: started, stopped and reported like spawned ones.

Each case runs in a fresh interpreter: a worker is forked only from a process with one thread,
which a test process that ran other tests is not.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

FORKED_CLUSTER = """
import sys
from pathlib import Path
from iris.cluster.local_cluster import LocalCluster
from iris.cluster.platform.local import LocalWorkerSpec

cluster = LocalCluster(workers=[{spec}], state_dir=Path(sys.argv[1]), fork_workers=True)
"""


def _run(code: str, state_dir: Path) -> subprocess.CompletedProcess[str]:
    script = textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script, str(state_dir)], capture_output=True, text=True, timeout=120)


def test_forked_worker_registers_and_stops_with_the_cluster(tmp_path: Path) -> None:
    code = FORKED_CLUSTER.format(spec='LocalWorkerSpec("local-0")') + textwrap.dedent("""
        with cluster:
            process = cluster.worker_processes["local-0"]
            print(type(process).__name__, sorted(cluster.healthy_worker_ids()))
        print("exit", process.returncode)
    """)
    result = _run(code, tmp_path)

    assert result.returncode == 0, result.stderr
    # Ended by the SIGTERM the cluster's stop sends, as a spawned worker is.
    assert result.stdout.splitlines() == ["ForkedProcess ['local-0']", "exit -15"], result.stdout
    log = (tmp_path / "workers" / "local-0" / "worker.log").read_text()
    assert "registered with" in log, log


def test_forked_worker_that_cannot_start_fails_the_start_with_its_reason(tmp_path: Path) -> None:
    spec = 'LocalWorkerSpec("local-0", gpu_spec="no such gpu")'
    code = FORKED_CLUSTER.format(spec=spec) + textwrap.dedent("""
        try:
            cluster.start(timeout=60)
        except RuntimeError as exc:
            print(exc)
    """)
    result = _run(code, tmp_path)

    assert result.returncode == 0, result.stderr
    assert "local worker local-0 exited with code 2" in result.stdout, result.stdout
    assert "invalid GPU spec" in result.stdout, result.stdout


def test_cluster_with_another_thread_running_spawns_its_worker_instead(tmp_path: Path) -> None:
    code = FORKED_CLUSTER.format(spec='LocalWorkerSpec("local-0")') + textwrap.dedent("""
        import threading
        release = threading.Event()
        threading.Thread(target=release.wait, daemon=True).start()
        with cluster:
            process = cluster.worker_processes["local-0"]
            print(type(process).__name__, sorted(cluster.healthy_worker_ids()))
        release.set()
    """)
    result = _run(code, tmp_path)

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["Popen ['local-0']"], result.stdout


def test_forked_worker_stopped_as_it_forks_ends_by_the_signal_not_the_parents_handler(tmp_path: Path) -> None:
    # SIGTERM sent the moment the fork returns, before the worker has handlers of its own: the
    # parent's handler (a local cluster's raises to stop it) must not run in the worker.
    code = textwrap.dedent("""
        import os
        import signal
        import sys
        from pathlib import Path
        from iris.cluster.local_worker import fork_worker
        from iris.cluster.platform.local import LocalWorkerSpec, worker_args

        def parents_handler(signum, frame):
            raise RuntimeError("the parent's SIGTERM handler ran")

        signal.signal(signal.SIGTERM, parents_handler)
        work_dir = Path(sys.argv[1])
        spec = LocalWorkerSpec("local-0")
        # A worker the parent's handler kept alive still ends with this interpreter.
        args = worker_args(spec, "http://127.0.0.1:9", work_dir, 1.0, exit_with_pid=os.getpid())
        process = fork_worker(args, work_dir / "worker.log", {}, [])
        process.terminate()
        print("exit", process.wait(30))
    """)
    result = _run(code, tmp_path)

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["exit -15"], result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
