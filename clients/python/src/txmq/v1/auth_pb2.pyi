from google.protobuf import descriptor_pb2 as _descriptor_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ResourceType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESOURCE_TYPE_UNSPECIFIED: _ClassVar[ResourceType]
    RESOURCE_TYPE_CLUSTER: _ClassVar[ResourceType]
    RESOURCE_TYPE_TOPIC: _ClassVar[ResourceType]
    RESOURCE_TYPE_GROUP: _ClassVar[ResourceType]

class Action(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACTION_UNSPECIFIED: _ClassVar[Action]
    ACTION_PUB: _ClassVar[Action]
    ACTION_SUB: _ClassVar[Action]
    ACTION_CREATE: _ClassVar[Action]
    ACTION_UPDATE: _ClassVar[Action]
    ACTION_DELETE: _ClassVar[Action]
    ACTION_GET: _ClassVar[Action]
    ACTION_LIST: _ClassVar[Action]
    ACTION_ALL: _ClassVar[Action]

class AccessScope(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACCESS_SCOPE_UNSPECIFIED: _ClassVar[AccessScope]
    ACCESS_SCOPE_ANYONE: _ClassVar[AccessScope]
    ACCESS_SCOPE_USER: _ClassVar[AccessScope]
    ACCESS_SCOPE_SUPER_USER: _ClassVar[AccessScope]
RESOURCE_TYPE_UNSPECIFIED: ResourceType
RESOURCE_TYPE_CLUSTER: ResourceType
RESOURCE_TYPE_TOPIC: ResourceType
RESOURCE_TYPE_GROUP: ResourceType
ACTION_UNSPECIFIED: Action
ACTION_PUB: Action
ACTION_SUB: Action
ACTION_CREATE: Action
ACTION_UPDATE: Action
ACTION_DELETE: Action
ACTION_GET: Action
ACTION_LIST: Action
ACTION_ALL: Action
ACCESS_SCOPE_UNSPECIFIED: AccessScope
ACCESS_SCOPE_ANYONE: AccessScope
ACCESS_SCOPE_USER: AccessScope
ACCESS_SCOPE_SUPER_USER: AccessScope
ACCESS_FIELD_NUMBER: int
access: _descriptor.FieldDescriptor

class ResourceCheck(_message.Message):
    __slots__ = ("type", "action", "field", "when_set")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    WHEN_SET_FIELD_NUMBER: _ClassVar[int]
    type: ResourceType
    action: Action
    field: str
    when_set: bool
    def __init__(self, type: _Optional[_Union[ResourceType, str]] = ..., action: _Optional[_Union[Action, str]] = ..., field: _Optional[str] = ..., when_set: _Optional[bool] = ...) -> None: ...

class Access(_message.Message):
    __slots__ = ("scope", "checks", "handler_checks")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    HANDLER_CHECKS_FIELD_NUMBER: _ClassVar[int]
    scope: AccessScope
    checks: _containers.RepeatedCompositeFieldContainer[ResourceCheck]
    handler_checks: str
    def __init__(self, scope: _Optional[_Union[AccessScope, str]] = ..., checks: _Optional[_Iterable[_Union[ResourceCheck, _Mapping]]] = ..., handler_checks: _Optional[str] = ...) -> None: ...

class User(_message.Message):
    __slots__ = ("username", "secret_key", "super_user", "disabled", "created_at_ms", "produce_bytes_per_second", "fetch_bytes_per_second")
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    SECRET_KEY_FIELD_NUMBER: _ClassVar[int]
    SUPER_USER_FIELD_NUMBER: _ClassVar[int]
    DISABLED_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    PRODUCE_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    FETCH_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    username: str
    secret_key: str
    super_user: bool
    disabled: bool
    created_at_ms: int
    produce_bytes_per_second: int
    fetch_bytes_per_second: int
    def __init__(self, username: _Optional[str] = ..., secret_key: _Optional[str] = ..., super_user: _Optional[bool] = ..., disabled: _Optional[bool] = ..., created_at_ms: _Optional[int] = ..., produce_bytes_per_second: _Optional[int] = ..., fetch_bytes_per_second: _Optional[int] = ...) -> None: ...

class Policy(_message.Message):
    __slots__ = ("resource", "actions", "decision", "source_ips")
    class Decision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        DECISION_UNSPECIFIED: _ClassVar[Policy.Decision]
        DECISION_ALLOW: _ClassVar[Policy.Decision]
        DECISION_DENY: _ClassVar[Policy.Decision]
    DECISION_UNSPECIFIED: Policy.Decision
    DECISION_ALLOW: Policy.Decision
    DECISION_DENY: Policy.Decision
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_IPS_FIELD_NUMBER: _ClassVar[int]
    resource: str
    actions: _containers.RepeatedScalarFieldContainer[Action]
    decision: Policy.Decision
    source_ips: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, resource: _Optional[str] = ..., actions: _Optional[_Iterable[_Union[Action, str]]] = ..., decision: _Optional[_Union[Policy.Decision, str]] = ..., source_ips: _Optional[_Iterable[str]] = ...) -> None: ...

class Acl(_message.Message):
    __slots__ = ("username", "policies")
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    username: str
    policies: _containers.RepeatedCompositeFieldContainer[Policy]
    def __init__(self, username: _Optional[str] = ..., policies: _Optional[_Iterable[_Union[Policy, _Mapping]]] = ...) -> None: ...

class CreateUserRequest(_message.Message):
    __slots__ = ("user",)
    USER_FIELD_NUMBER: _ClassVar[int]
    user: User
    def __init__(self, user: _Optional[_Union[User, _Mapping]] = ...) -> None: ...

class UpdateUserRequest(_message.Message):
    __slots__ = ("user",)
    USER_FIELD_NUMBER: _ClassVar[int]
    user: User
    def __init__(self, user: _Optional[_Union[User, _Mapping]] = ...) -> None: ...

class DeleteUserRequest(_message.Message):
    __slots__ = ("username",)
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    username: str
    def __init__(self, username: _Optional[str] = ...) -> None: ...

class GetUserRequest(_message.Message):
    __slots__ = ("username",)
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    username: str
    def __init__(self, username: _Optional[str] = ...) -> None: ...

class ListUsersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UserResponse(_message.Message):
    __slots__ = ("user",)
    USER_FIELD_NUMBER: _ClassVar[int]
    user: User
    def __init__(self, user: _Optional[_Union[User, _Mapping]] = ...) -> None: ...

class ListUsersResponse(_message.Message):
    __slots__ = ("users",)
    USERS_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedCompositeFieldContainer[User]
    def __init__(self, users: _Optional[_Iterable[_Union[User, _Mapping]]] = ...) -> None: ...

class DeleteUserResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PutAclRequest(_message.Message):
    __slots__ = ("acl",)
    ACL_FIELD_NUMBER: _ClassVar[int]
    acl: Acl
    def __init__(self, acl: _Optional[_Union[Acl, _Mapping]] = ...) -> None: ...

class GetAclRequest(_message.Message):
    __slots__ = ("username",)
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    username: str
    def __init__(self, username: _Optional[str] = ...) -> None: ...

class DeleteAclRequest(_message.Message):
    __slots__ = ("username",)
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    username: str
    def __init__(self, username: _Optional[str] = ...) -> None: ...

class ListAclsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AclResponse(_message.Message):
    __slots__ = ("acl",)
    ACL_FIELD_NUMBER: _ClassVar[int]
    acl: Acl
    def __init__(self, acl: _Optional[_Union[Acl, _Mapping]] = ...) -> None: ...

class ListAclsResponse(_message.Message):
    __slots__ = ("acls",)
    ACLS_FIELD_NUMBER: _ClassVar[int]
    acls: _containers.RepeatedCompositeFieldContainer[Acl]
    def __init__(self, acls: _Optional[_Iterable[_Union[Acl, _Mapping]]] = ...) -> None: ...

class DeleteAclResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WhoAmIRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WhoAmIResponse(_message.Message):
    __slots__ = ("username", "super_user", "authenticated_by", "auth_enabled")
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    SUPER_USER_FIELD_NUMBER: _ClassVar[int]
    AUTHENTICATED_BY_FIELD_NUMBER: _ClassVar[int]
    AUTH_ENABLED_FIELD_NUMBER: _ClassVar[int]
    username: str
    super_user: bool
    authenticated_by: str
    auth_enabled: bool
    def __init__(self, username: _Optional[str] = ..., super_user: _Optional[bool] = ..., authenticated_by: _Optional[str] = ..., auth_enabled: _Optional[bool] = ...) -> None: ...

class StoredUser(_message.Message):
    __slots__ = ("user", "sealed_secret")
    USER_FIELD_NUMBER: _ClassVar[int]
    SEALED_SECRET_FIELD_NUMBER: _ClassVar[int]
    user: User
    sealed_secret: bytes
    def __init__(self, user: _Optional[_Union[User, _Mapping]] = ..., sealed_secret: _Optional[bytes] = ...) -> None: ...
