"""The dashboard in a real browser against a local cluster running real jobs: one pending with a
reason, one failed, one running with logs, a gang, a parent with a child, and hostile text."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect

from iris.client import IrisClient
from iris.cluster.controller.controller import now_ms
from iris.cluster.local_cluster import LocalCluster
from iris.cluster.types import CoschedulingConfig, Entrypoint, EnvironmentSpec, ResourceSpec
from iris.config import load_and_validate
from iris.rpc import cluster_pb2 as pb
from iris.time import wait_until

HOSTILE_NAME = "<img src=x onerror=alert(1)>"
HOSTILE_LINE = "<script>window.__pwned = 1; alert(2)</script>"
HOSTILE_ENV = "<svg onload=alert(3)>"


def _config(root: Path) -> Path:
    path = root / "cluster.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            name: dashboard-test
            platform:
              local: {{}}
            storage:
              bundle_prefix: file://{root / "bundles"}
            controller:
              local:
                state_dir: {root / "state"}
                port: 0
            defaults:
              timeouts:
                heartbeat_interval: 1s
                worker_timeout: 30s
                kill_grace_period: 1s
              autoscaler:
                evaluation_interval: 200ms
                scale_up_delay: 0s
                scale_down_delay: 600s
            scale_groups:
              cpu:
                min_slices: 1
                max_slices: 1
                resources:
                  cpu: 2
                  ram: 2GB
                slice_template:
                  accelerator_type: cpu
                  num_vms: 2
                  local: {{}}
            """
        )
    )
    return path


class Scenario:
    def __init__(self, cluster: LocalCluster, client: IrisClient):
        self.cluster = cluster
        self.client = client
        self.url = cluster.url + "/"

    def job_state(self, job_id: str) -> int:
        return self.client.call("get_job_status", pb.GetJobStatusRequest(job_id=job_id)).job.state


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    root = tmp_path_factory.mktemp("dashboard-cluster")
    workspace = root / "ws"
    workspace.mkdir()
    config_path = _config(root)
    cluster = LocalCluster(load_and_validate(config_path), state_dir=root / "state", config_path=str(config_path))
    cluster.start()
    try:
        with IrisClient.remote(cluster.url, workspace=workspace) as client:
            small = ResourceSpec(cpu=0.5, memory="50MB")
            client.submit(
                Entrypoint.from_command(
                    "bash", "-c", f"echo '{HOSTILE_LINE}'; for i in $(seq 1 100000); do echo tick $i; sleep 0.3; done"
                ),
                name="chatty",
                resources=small,
                environment=EnvironmentSpec(env_vars={"GREETING": HOSTILE_ENV}),
            )
            client.submit(
                Entrypoint.from_command("bash", "-c", "sleep 600"),
                name="gang",
                resources=small,
                replicas=2,
                coscheduling=CoschedulingConfig("tpu-name"),
            )
            client.submit(
                Entrypoint.from_command("bash", "-c", "echo about to fail >&2; exit 3"), name="broken", resources=small
            )
            # A whole worker's cpu: servable in principle (so not refused at submit), but the
            # long-running jobs above leave no worker that much, so it waits and says why.
            client.submit(Entrypoint.from_command("true"), name="too-big", resources=ResourceSpec(cpu=2, memory="1GB"))
            client.submit(Entrypoint.from_command("bash", "-c", "sleep 600"), name="parent", resources=small)
            child = pb.LaunchJobRequest(
                name="child-eval",
                parent_job_id="/parent",
                entrypoint=Entrypoint.from_command("true").proto,
                resources=ResourceSpec(cpu=2, memory="1GB").to_proto(),
                replicas=1,
            )
            client.call("launch_job", child)
            # The API refuses such a name, so plant it the way an older controller or a bad
            # migration could have left it: straight in the store, then kill it.
            store = cluster.daemon.store
            store.create_job(
                "/hostile",
                pb.LaunchJobRequest(
                    name=HOSTILE_NAME,
                    entrypoint=Entrypoint.from_command("true").proto,
                    resources=ResourceSpec(cpu=64, memory="1GB").to_proto(),
                    replicas=1,
                ),
                now_ms(),
            )
            store.terminate_job("/hostile", HOSTILE_NAME, now_ms())
            client.call(
                "register_endpoint",
                pb.RegisterEndpointRequest(
                    name="metrics", address="127.0.0.1:9999", job_id="/chatty", metadata={"note": "<b>not bold</b>"}
                ),
            )
            scenario = Scenario(cluster, client)
            wait_until(
                lambda: scenario.job_state("/chatty") == pb.JOB_STATE_RUNNING
                and scenario.job_state("/gang") == pb.JOB_STATE_RUNNING
                and scenario.job_state("/broken") == pb.JOB_STATE_FAILED,
                60,
                0.1,
                "the scenario's jobs to run and fail",
            )
            yield scenario
    finally:
        cluster.stop()


def _open(page, scenario: Scenario, route: str = "#/jobs") -> None:
    page.goto(scenario.url + route)


def test_dashboard_jobs_page_lists_jobs_with_states_and_reasons(page, scenario, screenshots):
    _open(page, scenario)
    rows = page.locator("table.jobs tbody tr")
    expect(rows.filter(has_text="chatty")).to_contain_text("running")
    expect(rows.filter(has_text="broken")).to_contain_text("failed")
    expect(rows.filter(has_text="too-big")).to_contain_text("pending")
    # Why it waits, in the words of the scheduler.
    expect(rows.filter(has_text="too-big").locator("td.why")).to_contain_text(re.compile(r"cpu", re.I))
    expect(rows.filter(has_text="gang")).to_contain_text("2: 2 running")
    expect(page.locator("figure.chart[data-title='Jobs by state over time'] circle").first).to_be_attached()
    page.screenshot(path=screenshots / "jobs.png", full_page=True)
    assert page.page_errors == []


def test_dashboard_jobs_filter_by_state_and_name_narrows_the_table(page, scenario):
    _open(page, scenario)
    rows = page.locator("table.jobs tbody tr")
    info = page.locator(".page-info")
    page.get_by_label("State", exact=True).select_option("FAILED")
    expect(rows).to_have_text([re.compile("broken")])
    page.get_by_label("State", exact=True).select_option("")
    expect(info).to_contain_text("top-level")
    page.get_by_label("Filter by name").fill("GAN")
    expect(rows).to_have_text([re.compile("gang")])
    expect(info).to_contain_text("1 matching")
    page.get_by_label("Filter by name").fill("")
    expect(info).to_contain_text("top-level")
    page.get_by_label("Sort").select_option("JOB_ORDER_NAME")
    expect(rows.first).to_contain_text("broken")
    page.get_by_label("Sort").select_option("JOB_ORDER_NAME_DESC")
    expect(rows.first).to_contain_text("too-big")


def test_dashboard_jobs_tree_unfolds_child_jobs_under_their_parent(page, scenario):
    _open(page, scenario)
    parent = page.locator("table.jobs tbody tr[data-job='/parent']")
    expect(parent).to_contain_text("1 child")
    expect(page.locator("tr[data-job='/parent/child-eval']")).to_have_count(0)
    parent.get_by_role("button").click()
    child = page.locator("tr[data-job='/parent/child-eval']")
    expect(child).to_contain_text("pending")
    # The child sits right under its parent.
    expect(page.locator("tr[data-job='/parent'] + tr")).to_have_attribute("data-job", "/parent/child-eval")


def test_dashboard_click_through_job_task_logs_follows_new_lines(page, scenario, screenshots):
    _open(page, scenario)
    page.locator("table.jobs").get_by_role("link", name="chatty", exact=True).click()
    expect(page.locator("h1")).to_contain_text("chatty")
    expect(page.locator("table.tasks tbody tr")).to_contain_text("running")
    expect(page.locator("table.tasks tbody tr")).to_contain_text(re.compile(r"slice|local|worker|cpu", re.I))
    expect(page.locator("ol.story")).to_contain_text("running")
    expect(page.locator("code.command")).to_contain_text("bash -c echo")
    page.screenshot(path=screenshots / "job.png", full_page=True)
    page.get_by_role("link", name="task 0", exact=True).click()
    logs = page.get_by_role("log", name="Task logs")
    expect(logs).to_contain_text("tick 1")
    expect(logs).to_contain_text(HOSTILE_LINE)

    def ticks() -> int:
        return max(int(n) for n in re.findall(r"tick (\d+)", logs.inner_text()))

    seen = ticks()
    # Follow: lines printed after the page loaded appear without a reload.
    wait_until(lambda: ticks() >= seen + 3, 20, 0.2, "new log lines to appear")
    following = page.evaluate("() => { const l = document.querySelector('.logs'); return l.scrollHeight - l.scrollTop - l.clientHeight; }")
    assert following < 30, "with Follow on, the newest line stays in view"
    expect(page.locator("figure.chart[data-title='Memory'] circle")).to_be_attached(timeout=20_000)
    page.screenshot(path=screenshots / "task.png", full_page=True)
    assert page.page_errors == []


def test_dashboard_failed_job_shows_why_it_failed(page, scenario):
    _open(page, scenario, "#/job/" + "%2Fbroken")
    expect(page.locator("p.error-text")).to_contain_text(re.compile(r"exit|code 3|fail", re.I))
    expect(page.locator("table.tasks tbody tr")).to_contain_text("failed")
    page.get_by_role("link", name="task 0", exact=True).click()
    expect(page.get_by_role("log", name="Task logs")).to_contain_text("about to fail")
    expect(page.locator("table.attempts tbody tr")).to_contain_text("3")


def test_dashboard_hostile_names_and_log_lines_render_as_text_and_run_nothing(page, scenario, screenshots):
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    _open(page, scenario)
    expect(page.locator("table.jobs")).to_contain_text(HOSTILE_NAME)
    _open(page, scenario, "#/job/%2Fhostile")
    expect(page.locator("h1")).to_contain_text(HOSTILE_NAME)
    _open(page, scenario, "#/job/%2Fchatty")
    expect(page.locator("table.env")).to_contain_text(f"GREETING{HOSTILE_ENV}")
    assert page.locator("main svg").count() == 0
    _open(page, scenario, "#/task/" + "%2Fchatty%2F0")
    expect(page.get_by_role("log", name="Task logs")).to_contain_text(HOSTILE_LINE)
    _open(page, scenario, "#/endpoints")
    expect(page.locator("table.endpoints")).to_contain_text("note=<b>not bold</b>")
    page.screenshot(path=screenshots / "endpoints.png", full_page=True)
    assert page.locator("main img, main script, main b").count() == 0
    assert page.evaluate("() => window.__pwned") is None
    assert dialogs == []


def test_dashboard_workers_page_shows_health_tasks_attributes_and_resources(page, scenario, screenshots):
    _open(page, scenario, "#/workers")
    rows = page.locator("table.workers tbody tr")
    expect(rows).to_have_count(2)
    expect(page.locator("main")).to_contain_text("2 worker(s), 2 healthy")
    expect(rows.first).to_contain_text("healthy")
    expect(rows.first).to_contain_text(re.compile(r"\d+s ago"))
    expect(rows.first).to_contain_text("tpu-name=")
    expect(rows.first).to_contain_text(re.compile(r"CPU [\d.]+ / 2(?![\d.])"))
    expect(page.locator("table.workers").get_by_role("link", name="/gang/0")).to_be_visible()
    page.screenshot(path=screenshots / "workers.png", full_page=True)


def test_dashboard_autoscaler_page_shows_groups_slices_story_and_actions(page, scenario, screenshots):
    _open(page, scenario, "#/autoscaler")
    group = page.locator("section.group[data-group='cpu']")
    expect(group).to_contain_text("1 / 1 ready / 1")
    expect(group.locator("table.slices tbody tr").first).to_contain_text("ready")
    # The oversized job is demand this group cannot meet; the page says why.
    expect(page.locator("main")).to_contain_text(re.compile(r"cpu", re.I))
    expect(page.locator("table.actions")).to_contain_text("scale_up")
    expect(group.locator("figure.chart circle").first).to_be_attached()
    group.locator("table.slices tbody tr").first.get_by_role("button").click()
    expect(group.locator("td[data-story] ol.story")).to_contain_text("ready")
    page.screenshot(path=screenshots / "autoscaler.png", full_page=True)
    assert page.page_errors == []


def test_dashboard_pages_refresh_themselves_without_a_reload(page, scenario):
    _open(page, scenario)
    page.evaluate("() => { window.__sameDocument = true; }")
    scenario.client.submit(Entrypoint.from_command("true"), name="late-arrival", resources=ResourceSpec(cpu=0.5, memory="50MB"))
    expect(page.locator("table.jobs")).to_contain_text("late-arrival")
    assert page.evaluate("() => window.__sameDocument") is True


def test_dashboard_unknown_job_shows_the_controllers_reason(page, scenario):
    _open(page, scenario, "#/job/%2Fno-such-job")
    expect(page.locator("#status")).to_contain_text("job /no-such-job not found")
