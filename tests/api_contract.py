"""The API contract, checked on every real response: the OpenAPI document the service serves
(``jupyterhub_gpulab.service.web.openapi``) gives each path, method and status a schema, and
:func:`check_response` validates a response's JSON body against it (``jsonschema``, Draft
2020-12 as OpenAPI 3.1 says, ``$ref``s resolved in the document).

:func:`validating_requests` wraps ``requests.Session.send`` (which ``requests.get`` and friends
use too), so every response from the service's ``api/`` in a test is checked, its errors
(``{"status", "message"}``) included: no endpoint escapes. A path the document does not name must
answer 404, a method it does not name 405, both with its ``Error`` schema.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from urllib.parse import urlsplit

import pytest
import requests
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from service_support import PREFIX

from jupyterhub_gpulab.service.web.openapi import openapi

DOC_URI = "urn:gpulab:openapi"
ERROR = {"$ref": "#/components/schemas/Error"}


@functools.cache
def document() -> dict:
    return openapi(PREFIX)


@functools.cache
def _registry() -> Registry:
    return Registry().with_resource(DOC_URI, Resource(document(), specification=DRAFT202012))


def _follow(node: dict) -> dict:
    while isinstance(node, dict) and "$ref" in node:
        pointer = node["$ref"].removeprefix("#/").split("/")
        node = document()
        for part in pointer:
            node = node[part]
    return node


def _template(path: str) -> re.Pattern:
    """``/users/{user}/servers/{name}`` as a pattern: a parameter is one path segment."""
    return re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(path)) + "$")


def operation_path(api_path: str) -> str | None:
    """The document's path template ``api_path`` (after ``…/api``) falls under, or ``None``."""
    for template in document()["paths"]:
        if _template(template).match(api_path):
            return template
    return None


def response_schema(api_path: str, method: str, status: int) -> tuple[str, dict | None]:
    """``(content type, JSON schema)`` the document gives ``method api_path`` answering
    ``status``; the schema is ``None`` for a body that is not JSON. Fails the test where the
    document does not list that answer."""
    template = operation_path(api_path)
    if template is None:
        assert status == 404, f"{method} {api_path}: not in the API document, answered {status}"
        return "application/json", ERROR
    op = document()["paths"][template].get(method.lower())
    if op is None:
        assert status == 405, f"{method} {template}: not in the API document, answered {status}"
        return "application/json", ERROR
    answer = op["responses"].get(str(status))
    assert answer is not None, (
        f"{method} {template} answered {status}, which the API document does not list "
        f"(it lists {sorted(op['responses'])})"
    )
    [(content_type, media)] = _follow(answer)["content"].items()
    return content_type, (media["schema"] if content_type == "application/json" else None)


def check_body(api_path: str, method: str, status: int, body) -> None:
    """Validate a decoded JSON ``body`` against the document; ``AssertionError`` saying where it
    departs from it."""
    _, schema = response_schema(api_path, method, status)
    assert schema is not None, f"{method} {api_path} {status} is documented as not JSON"
    validator = Draft202012Validator(
        {"$ref": DOC_URI + "#" + _pointer_of(schema)} if "$ref" in schema else schema,
        registry=_registry(),
    )
    errors = sorted(validator.iter_errors(body), key=lambda e: list(e.absolute_path))
    assert not errors, f"{method} {api_path} {status} breaks the API document:\n" + "\n".join(
        f"  at /{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors[:10]
    )


def _pointer_of(schema: dict) -> str:
    return schema["$ref"].removeprefix("#")


def check_response(r: requests.Response) -> None:
    """Validate ``r`` against the document if it came from the service's ``api/`` (any other
    response passes untouched)."""
    path = urlsplit(r.url).path
    base = PREFIX + "api"
    if not path.startswith(base) or path == base + "/openapi.json" or r.request.method == "HEAD":
        return
    api_path = path[len(base) :] or "/"
    content_type, _ = response_schema(api_path, r.request.method, r.status_code)
    got = r.headers.get("Content-Type", "").split(";")[0].strip()
    assert got == content_type, f"{r.request.method} {api_path}: {got}, documented {content_type}"
    if content_type == "application/json":
        check_body(api_path, r.request.method, r.status_code, json.loads(r.content))


@contextlib.contextmanager
def validating_requests():
    """Within: every response ``requests`` receives is passed to :func:`check_response`."""
    send = requests.Session.send

    def checked_send(self, request, **kw):
        r = send(self, request, **kw)
        for each in (*r.history, r):
            check_response(each)
        return r

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(requests.Session, "send", checked_send)
        yield
