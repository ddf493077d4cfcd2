from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ActorCall(_message.Message):
    __slots__ = ("actor_name", "method_name", "serialized_args", "serialized_kwargs")
    ACTOR_NAME_FIELD_NUMBER: _ClassVar[int]
    METHOD_NAME_FIELD_NUMBER: _ClassVar[int]
    SERIALIZED_ARGS_FIELD_NUMBER: _ClassVar[int]
    SERIALIZED_KWARGS_FIELD_NUMBER: _ClassVar[int]
    actor_name: str
    method_name: str
    serialized_args: bytes
    serialized_kwargs: bytes
    def __init__(self, actor_name: _Optional[str] = ..., method_name: _Optional[str] = ..., serialized_args: _Optional[bytes] = ..., serialized_kwargs: _Optional[bytes] = ...) -> None: ...

class ActorError(_message.Message):
    __slots__ = ("error_type", "message", "traceback", "serialized_exception")
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    SERIALIZED_EXCEPTION_FIELD_NUMBER: _ClassVar[int]
    error_type: str
    message: str
    traceback: str
    serialized_exception: bytes
    def __init__(self, error_type: _Optional[str] = ..., message: _Optional[str] = ..., traceback: _Optional[str] = ..., serialized_exception: _Optional[bytes] = ...) -> None: ...

class ActorResponse(_message.Message):
    __slots__ = ("serialized_value", "error")
    SERIALIZED_VALUE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    serialized_value: bytes
    error: ActorError
    def __init__(self, serialized_value: _Optional[bytes] = ..., error: _Optional[_Union[ActorError, _Mapping]] = ...) -> None: ...

class ListMethodsRequest(_message.Message):
    __slots__ = ("actor_name",)
    ACTOR_NAME_FIELD_NUMBER: _ClassVar[int]
    actor_name: str
    def __init__(self, actor_name: _Optional[str] = ...) -> None: ...

class MethodInfo(_message.Message):
    __slots__ = ("name", "signature", "docstring")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    DOCSTRING_FIELD_NUMBER: _ClassVar[int]
    name: str
    signature: str
    docstring: str
    def __init__(self, name: _Optional[str] = ..., signature: _Optional[str] = ..., docstring: _Optional[str] = ...) -> None: ...

class ListMethodsResponse(_message.Message):
    __slots__ = ("methods",)
    METHODS_FIELD_NUMBER: _ClassVar[int]
    methods: _containers.RepeatedCompositeFieldContainer[MethodInfo]
    def __init__(self, methods: _Optional[_Iterable[_Union[MethodInfo, _Mapping]]] = ...) -> None: ...

class ActorHealthRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ActorHealthResponse(_message.Message):
    __slots__ = ("healthy", "actor_names")
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    ACTOR_NAMES_FIELD_NUMBER: _ClassVar[int]
    healthy: bool
    actor_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, healthy: _Optional[bool] = ..., actor_names: _Optional[_Iterable[str]] = ...) -> None: ...
