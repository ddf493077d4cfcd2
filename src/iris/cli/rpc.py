"""`iris rpc`: call any controller, worker or actor RPC by name with a JSON body.

The body is checked against the method's request message before anything is sent, so a misspelt
field is reported with the field's name; the answer is printed as JSON. Calls use the Connect
protocol's JSON encoding, the same the dashboard speaks.
"""

from __future__ import annotations

import json
import sys

import click
import httpx
from google.protobuf import json_format
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor

from iris.cli.connect import CONFIG_HELP, CONTROLLER_URL_HELP, connection_from_context, open_controller_url
from iris.client.credentials import resolve_token
from iris.rpc import actor_pb2, cluster_pb2

# The controller serves this one; the others live on workers and actor servers, reached by --url.
CONTROLLER_SERVICE = cluster_pb2.DESCRIPTOR.services_by_name["ControllerService"]
SERVICES: dict[str, ServiceDescriptor] = {
    service.name: service
    for module in (cluster_pb2, actor_pb2)
    for service in module.DESCRIPTOR.services_by_name.values()
}
RPC_TIMEOUT_S = 60.0


def find_method(service_name: str, method_name: str) -> MethodDescriptor:
    """The method named on the command line; the service may be given short or fully qualified."""
    service = SERVICES.get(service_name) or next(
        (s for s in SERVICES.values() if s.full_name == service_name), None
    )
    if service is None:
        raise click.BadParameter(
            f"no service {service_name!r}; services: {', '.join(sorted(SERVICES))} (iris rpc --list shows their methods)",
            param_hint="SERVICE",
        )
    method = service.methods_by_name.get(method_name)
    if method is None:
        methods = ", ".join(sorted(service.methods_by_name))
        raise click.BadParameter(f"{service.name} has no method {method_name!r}; it has: {methods}", param_hint="METHOD")
    return method


def request_body(method: MethodDescriptor, text: str) -> dict:
    """The request as JSON, checked against the method's request message."""
    request_class = _message_class(method.input_type)
    try:
        message = json_format.Parse(text or "{}", request_class())
    except json_format.ParseError as exc:
        raise click.BadParameter(f"not a {method.input_type.name}: {exc}", param_hint="JSON") from None
    return json_format.MessageToDict(message)


def _message_class(descriptor):
    for module in (cluster_pb2, actor_pb2):
        if descriptor.file.name == module.DESCRIPTOR.name:
            return getattr(module, descriptor.name)
    raise click.ClickException(f"{descriptor.full_name} is not an Iris message")


def _list_methods() -> None:
    for service in SERVICES.values():
        where = "controller" if service is CONTROLLER_SERVICE else "--url of a worker or actor server"
        click.echo(f"{service.name}  ({service.full_name}, on the {where})")
        for method in service.methods:
            click.echo(f"  {method.name}({method.input_type.name}) -> {method.output_type.name}")


@click.command("rpc")
@click.argument("service", required=False)
@click.argument("method", required=False)
@click.argument("body", metavar="[JSON]", required=False)
@click.option("--list", "list_methods", is_flag=True, help="List every service and method, with their message types.")
@click.option("--url", help="Call this server instead of the controller: a worker's or an actor server's URL.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help=CONFIG_HELP)
@click.option("--controller-url", help=CONTROLLER_URL_HELP)
def rpc(
    service: str | None,
    method: str | None,
    body: str | None,
    list_methods: bool,
    url: str | None,
    config_path: str | None,
    controller_url: str | None,
) -> None:
    """Call SERVICE.METHOD with a JSON request body (or '-' to read it from stdin) and print the answer.

    \b
    Examples:
      iris rpc --list
      iris rpc --config cluster.yaml ControllerService ListJobs '{"limit": 5}'
      iris rpc ControllerService GetJobStatus '{"jobId": "/train"}' --controller-url http://localhost:10000
      iris rpc WorkerService HealthCheck --url 10.0.0.7:10001

    Fields are named as in the protos, in camelCase or snake_case; enums by name. On a cluster
    with auth on, the call carries the token of `iris login` (or IRIS_TOKEN).
    """
    if list_methods:
        _list_methods()
        return
    if not service or not method:
        raise click.UsageError("name a SERVICE and a METHOD (iris rpc --list shows them)")
    descriptor = find_method(service, method)
    payload = request_body(descriptor, sys.stdin.read() if body == "-" else body or "")
    if url:
        answer = _call(url, descriptor, payload)
    elif descriptor.containing_service is not CONTROLLER_SERVICE:
        raise click.UsageError(f"{descriptor.containing_service.name} is not served by the controller: pass --url")
    else:
        with open_controller_url(*connection_from_context(config_path, controller_url)) as controller:
            answer = _call(controller, descriptor, payload)
    click.echo(json.dumps(answer, indent=2))


def _call(base_url: str, method: MethodDescriptor, payload: dict) -> dict:
    # Worker addresses are listed with a scheme, but a bare host:port is what people type.
    base_url = base_url if "://" in base_url else f"http://{base_url}"
    endpoint = f"{base_url.rstrip('/')}/{method.containing_service.full_name}/{method.name}"
    # The same token every other command sends (IRIS_TOKEN, else the file `iris login` wrote).
    token = resolve_token()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = httpx.post(endpoint, json=payload, headers=headers, timeout=RPC_TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise click.ClickException(f"cannot reach {base_url}: {exc}") from None
    try:
        answer = response.json()
    except ValueError:
        raise click.ClickException(
            f"{method.name} answered HTTP {response.status_code} without JSON: {response.text[:200]}"
        ) from None
    if response.status_code != 200:
        raise click.ClickException(f"{method.name} failed: {answer.get('code', response.status_code)}: {answer.get('message', '')}")
    return answer
