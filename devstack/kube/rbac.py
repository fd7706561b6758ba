"""Role-based access control for the Kubernetes API emulator (a development stand-in).

Off unless the emulator is given users (``KubeEmulator(users=...)``): then a bearer token names
a user and its groups, an unknown token is answered 401, and a resource request is allowed only
by the rules of the ClusterRoles and Roles bound to the user, as the apiserver's RBAC authorizer
decides it. Members of ``system:masters`` may do anything, as on a real cluster; paths that name
no resource (discovery, ``/version``, ``/healthz``) are open to every authenticated user, as the
default ``system:discovery`` role makes them.

Creating or updating a (Cluster)RoleBinding also needs the ``bind`` verb on the role it names.
The apiserver would also accept a binding whose permissions the user already holds; the emulator
does not compute that, so a test that passes here needs no more than a real cluster would.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from . import errors as err
from .resources import CLUSTER_ROLE_BINDINGS, CLUSTER_ROLES, RBAC_GROUP, ROLE_BINDINGS, ROLES
from .store import Obj, Store

MASTERS = "system:masters"
EVERYONE = ("system:authenticated",)


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = field(default_factory=tuple)

    @property
    def all_groups(self) -> tuple[str, ...]:
        service_account = self.name.split(":")
        extra: tuple[str, ...] = ()
        if len(service_account) == 4 and service_account[:2] == ["system", "serviceaccount"]:
            extra = ("system:serviceaccounts", f"system:serviceaccounts:{service_account[2]}")
        return (*self.groups, *extra, *EVERYONE)


@dataclass(frozen=True)
class Attributes:
    """What one request asks: a verb on a resource (and subresource) of an API group, in a
    namespace ("" for cluster-scoped objects or all namespaces), by name ("" for lists and
    creates)."""

    verb: str
    group: str
    resource: str
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    def describe(self, user: User) -> str:
        resource = self.resource + (f"/{self.subresource}" if self.subresource else "")
        where = f'in the namespace "{self.namespace}"' if self.namespace else "at the cluster scope"
        target = err.qualified(self.resource, self.group)
        subject = f'{target} "{self.name}"' if self.name else target
        return (
            f'{subject} is forbidden: User "{user.name}" cannot {self.verb} resource '
            f'"{resource}" in API group "{self.group}" {where}'
        )


def _matches(values: Iterable[str], wanted: str) -> bool:
    return any(value in ("*", wanted) for value in values)


def _resource_matches(resources: Iterable[str], request: Attributes) -> bool:
    full = request.resource + (f"/{request.subresource}" if request.subresource else "")
    for resource in resources:
        if resource in ("*", full):
            return True
        if request.subresource and resource in (
            f"{request.resource}/*",
            f"*/{request.subresource}",
        ):
            return True
    return False


def rule_allows(rule: dict[str, Any], request: Attributes) -> bool:
    if not _matches(rule.get("verbs") or [], request.verb):
        return False
    if not _matches(rule.get("apiGroups") or [], request.group):
        return False
    if not _resource_matches(rule.get("resources") or [], request):
        return False
    names = rule.get("resourceNames") or []
    return not names or (bool(request.name) and request.name in names)


def _subject_matches(subject: dict[str, Any], user: User) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return bool(name == user.name)
    if kind == "Group":
        return name in user.all_groups
    if kind == "ServiceAccount":
        return user.name == f"system:serviceaccount:{subject.get('namespace')}:{name}"
    return False


class Authorizer:
    """Tokens to users, and the RBAC decision for each request, from the roles and bindings in
    the emulator's store (read under its lock, so a binding counts from the moment it exists)."""

    def __init__(self, store: Store, users: dict[str, User]) -> None:
        self.store = store
        self.users = dict(users)

    def authenticate(self, authorization: str) -> User | None:
        scheme, _space, token = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return None
        return self.users.get(token.strip())

    def _rules(self, role_ref: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
        kind, name = role_ref.get("kind"), role_ref.get("name", "")
        role = (
            self.store.get(CLUSTER_ROLES, "", name)
            if kind == "ClusterRole"
            else self.store.get(ROLES, namespace, name)
        )
        return list((role or {}).get("rules") or [])

    def _bound(self, user: User, bindings: list[Obj]) -> list[Obj]:
        return [
            binding
            for binding in bindings
            if any(_subject_matches(s, user) for s in binding.get("subjects") or [])
        ]

    def allowed(self, user: User, request: Attributes) -> bool:
        if MASTERS in user.groups:
            return True
        with self.store.lock:
            rules = [
                rule
                for binding in self._bound(user, self.store.items(CLUSTER_ROLE_BINDINGS))
                for rule in self._rules(binding.get("roleRef") or {}, "")
            ]
            if request.namespace:
                rules += [
                    rule
                    for binding in self._bound(
                        user, self.store.items(ROLE_BINDINGS, request.namespace)
                    )
                    for rule in self._rules(binding.get("roleRef") or {}, request.namespace)
                ]
        return any(rule_allows(rule, request) for rule in rules)

    def check(self, user: User, request: Attributes) -> None:
        """Raise 403 Forbidden, worded as the apiserver words it, unless allowed."""
        if not self.allowed(user, request):
            raise err.ApiError(
                403,
                "Forbidden",
                request.describe(user),
                {"name": request.name, "group": request.group, "kind": request.resource}
                if request.name
                else {"group": request.group, "kind": request.resource},
            )

    def check_bind(self, user: User, binding: Any, namespace: str, plural: str) -> None:
        """A binding may be made only by a user allowed to `bind` the role it names (the
        apiserver's escalation check)."""
        role_ref = (binding or {}).get("roleRef") if isinstance(binding, dict) else None
        if not isinstance(role_ref, dict):
            return  # validation answers the malformed binding
        kind = role_ref.get("kind")
        request = Attributes(
            "bind",
            RBAC_GROUP,
            CLUSTER_ROLES.plural if kind == "ClusterRole" else ROLES.plural,
            namespace=namespace,
            name=str(role_ref.get("name") or ""),
        )
        if self.allowed(user, request):
            return
        name = str(((binding.get("metadata") or {}).get("name")) or "")
        raise err.forbidden_error(
            plural,
            RBAC_GROUP,
            name,
            f'user "{user.name}" (groups={list(user.groups)}) is attempting to grant RBAC '
            f'permissions not currently held: no "bind" on {kind} "{request.name}"',
        )


BINDING_PLURALS = (ROLE_BINDINGS.plural, CLUSTER_ROLE_BINDINGS.plural)


def unauthorized() -> err.ApiError:
    return err.ApiError(401, "Unauthorized", "Unauthorized", {})
