"""The error a Connect unary answer other than 200 stands for, as connectrpc's own client raises it:
the code and message of its JSON error body, or else the code its HTTP status maps to. Shared by the
lean clients (`iris.client.connect_client`, the controller's heartbeat calls) that parse answers
themselves."""

from __future__ import annotations

import json

from connectrpc._protocol import ConnectWireError
from connectrpc.code import Code
from connectrpc.errors import ConnectError


def error_of_answer(status: int, body: bytes) -> ConnectError:
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict):
        return ConnectWireError.from_dict(data, status, Code.UNAVAILABLE).to_exception()
    return ConnectWireError.from_http_status(status).to_exception()
