"""The console's forms as a browser finds them: crawl the pages a persona can reach, read every
``<form>`` (its action, method and fields with the values the page filled in), and make hostile
variants of a form's data for the error sweep (tests/api/errors/test_error_sweep_console.py).

Discovery instead of a list: a form added to a page later is swept without anyone listing it.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from unittest import mock
from urllib.parse import urlencode, urljoin, urlsplit
from weakref import WeakKeyDictionary

from django.conf import settings
from django.db import transaction
from django.test import Client
from django.urls import Resolver404, resolve

# Values a browser (or a script posing as one) may put in any field. Form-encoded, so every
# value is text: a NUL, a JSON text with NaN or with a key twice, a lone surrogate's escape.
HOSTILE: dict[str, str] = {
    "nan": "NaN",
    "infinity": "1e999",
    "nul": "a\x00b",
    "huge": "x" * 100_000,
    "negative": "-1",
    "big-integer": "9" * 40,
    "markup": "<script>alert(1)</script>",
    "json-nan": '{"a": NaN}',
    "json-nul": '["a\\u0000b"]',
    "json-lone-surrogate": '["\\ud800"]',
    "json-duplicate-key": '{"a": 1, "a": 2}',
    "empty": "",
}
# Raw JSON put in place of one leaf of a field's own JSON value (JSON text, not Python values).
LEAF_TOKENS: dict[str, str] = {
    "nan": "NaN",
    "infinity": "1e999",
    "nul": '"a\\u0000b"',
    "lone-surrogate": '"\\ud800"',
}
MAX_LEAVES = 12  # leaves of one JSON field replaced, one at a time
_MARK = "@@sweep@@"
_ROW_INDEX = re.compile(r"-\d+-")  # a row's number in a field's name: g-2-capability
# Whom each sweeping client last signed in, and the session key it got (``_signed_in``).
_SIGNED_IN: WeakKeyDictionary[Client, tuple[Any, str]] = WeakKeyDictionary()


@dataclass
class Form:
    page: str  # where it was found
    action: str
    method: str
    fields: dict[str, list[str]] = field(default_factory=dict)

    @property
    def route(self) -> str:
        try:
            return resolve(urlsplit(self.action).path).url_name or self.action
        except Resolver404:
            return self.action


class _Reader(HTMLParser):
    """Forms and links of one page."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.page = page
        self.forms: list[Form] = []
        self.links: list[str] = []
        self._form: Form | None = None
        self._select: tuple[str, list[str], list[str]] | None = None  # name, options, selected
        self._option: str | None = None
        self._textarea: tuple[str, list[str]] | None = None
        self._formactions: list[str] = []  # a button's other action: another form to send

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "a" and a.get("href"):
            self.links.append(urljoin(self.page, a["href"]))
        elif tag == "form":
            action = urljoin(self.page, a.get("action") or self.page)
            self._form = Form(self.page, action, (a.get("method") or "get").lower())
            self.forms.append(self._form)
        elif self._form is not None and a.get("formaction"):
            self._formactions.append(urljoin(self.page, a["formaction"]))
        elif self._form is not None and a.get("name"):
            self._field(tag, a)
        elif tag == "option" and self._select is not None:
            self._option_tag(a)

    def _field(self, tag: str, a: dict[str, str]) -> None:
        assert self._form is not None
        name = a["name"]
        kind = a.get("type", "text").lower()
        values = self._form.fields.setdefault(name, [])
        if tag == "textarea":
            self._textarea = (name, [])
        elif tag == "select":
            self._select = (name, [], [])
        elif tag == "button" or kind == "submit":
            if not values:
                values.append(a.get("value", ""))
        elif kind == "checkbox":
            if "checked" in a:
                values.append(a.get("value", "on"))
        elif kind == "radio":
            if "checked" in a or not values:  # the checked one, else the first
                values[:] = [a.get("value", "on")]
        else:
            values.append(a.get("value", ""))

    def _option_tag(self, a: dict[str, str]) -> None:
        assert self._select is not None
        self._option = a.get("value")
        if self._option is not None:
            self._select[1].append(self._option)
            if "selected" in a:
                self._select[2].append(self._option)

    def handle_data(self, data: str) -> None:
        if self._textarea is not None:
            self._textarea[1].append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "form" and self._form is not None:
            for action in self._formactions:
                fields = {k: v[:] for k, v in self._form.fields.items()}
                self.forms.append(Form(self.page, action, self._form.method, fields))
            self._form, self._formactions = None, []
        elif tag == "textarea" and self._textarea is not None and self._form is not None:
            name, parts = self._textarea
            self._form.fields[name] = ["".join(parts).removeprefix("\n")]
            self._textarea = None
        elif tag == "select" and self._select is not None and self._form is not None:
            name, options, selected = self._select
            usable = [o for o in options if o]
            self._form.fields[name] = selected or usable[:1]
            self._select = None


def crawl(client: Client, *starts: str, per_route: int = 4, limit: int = 100) -> list[Form]:
    """The forms on the console pages ``client`` reaches from ``/`` and ``starts`` (pages only a
    form's redirect leads to) by following links (not the admin, the API, logout or
    downloads), at most ``per_route`` pages per route."""
    seen: set[str] = set()
    per: dict[str, int] = {}
    queue: list[str] = ["/", *starts]
    forms: list[Form] = []
    while queue and len(seen) < limit:
        url = queue.pop(0)
        path = urlsplit(url).path
        if url in seen or path.startswith(("/admin/", "/api/", "/static/", "/logout/")):
            continue
        try:
            route = resolve(path).url_name or path
        except Resolver404:
            continue
        if per.get(route, 0) >= per_route or "export" in route:
            continue
        seen.add(url)
        per[route] = per.get(route, 0) + 1
        response = client.get(url)
        if response.status_code in (301, 302):
            queue.append(urljoin(url, response["Location"]))
            continue
        if response.status_code != 200 or "html" not in response.get("Content-Type", ""):
            continue
        reader = _Reader(url)
        reader.feed(response.content.decode())
        forms += reader.forms
        queue += [link for link in reader.links if urlsplit(link).netloc in ("", "testserver")]
    return forms


@contextlib.contextmanager
def contexts_not_kept() -> Iterator[None]:
    """Django's test client keeps a copy of the context of every template a response renders
    (``response.context``), each include too. A sweep reads only the status and the body, and
    the profile editor's rows are includes: copying their contexts was an eighth of the
    operator's sweep. Within this block, responses carry no ``context``."""
    with mock.patch("django.test.client.store_rendered_templates", _keep_nothing):
        yield


def _keep_nothing(*args: Any, **kwargs: Any) -> None:
    return None


def submit(client: Client, user: Any, form: Form, data: dict[str, list[str]]) -> Any:
    """Send ``data`` as ``form`` would, form-encoded as a browser does (Django's client would
    refuse a NUL in a value; a browser sends %00), in a transaction rolled back after it: each
    variant meets the same data."""
    _signed_in(client, user)
    with transaction.atomic():
        if form.method == "post":
            body = urlencode([(k, v) for k, values in data.items() for v in values])
            response = client.generic("POST", form.action, body.encode(),
                                      "application/x-www-form-urlencoded")  # fmt: skip
        else:
            response = client.get(form.action, data)
        transaction.set_rollback(True)
    return response


def _signed_in(client: Client, user: Any) -> None:
    """Sign ``user`` in again (outside the rolled-back transaction) only when the last variant
    ended the session: a logout clears the session cookie, a view that cycles the key sets a
    new one whose row the rollback took away. Otherwise the session row the rollback kept is
    still the one the cookie names (a sign-in per variant cost 5 queries and a tenth of the
    sweep's time)."""
    cookie = client.cookies.get(settings.SESSION_COOKIE_NAME)
    if cookie is not None and cookie.value and (user.pk, cookie.value) == _SIGNED_IN.get(client):
        return
    client.force_login(user)
    _SIGNED_IN[client] = (user.pk, client.cookies[settings.SESSION_COOKIE_NAME].value)


def variants(form: Form) -> Iterator[tuple[str, dict[str, Any]]]:
    """(label, data) pairs: the form as the page filled it, with one field made hostile at a
    time, sent twice, or one leaf of its JSON value replaced; and the form with no fields.

    A form of rows (the profile editor's grants ``g-0-…``, ``g-1-…`` and their constraints
    ``g-0-c-0-…``) has each kind of row field swept in its first row: the others are read by the
    same code (runs/views/grant_rows.py). The blank row a script copies (``g-__i__-…``) is a
    kind of its own. Every row is still in every variant, as the page filled it."""
    base = {name: values[:] for name, values in form.fields.items()}
    yield "as-filled", base
    yield "no-fields", {}
    kinds: set[str] = set()
    for name, values in base.items():
        kind_of_field = field_kind(name)
        if kind_of_field in kinds:
            continue
        kinds.add(kind_of_field)
        for kind, value in HOSTILE.items():
            yield f"{name}={kind}", {**base, name: [value]}
        yield f"{name} twice", {**base, name: [*(values or [""]), "<b>another</b>"]}
        for label, text in _json_variants(values[0] if values else ""):
            yield f"{name} {label}", {**base, name: [text]}


def field_kind(name: str) -> str:
    """A field's name without its row numbers: ``g-2-c-1-arg`` is a ``g-N-c-N-arg``."""
    return _ROW_INDEX.sub("-N-", name)


def _json_variants(text: str) -> Iterator[tuple[str, str]]:
    try:
        value = json.loads(text)
    except ValueError:
        return
    if not isinstance(value, dict | list):
        return
    for path in _leaves(value)[:MAX_LEAVES]:
        marked = json.dumps(_replace(value, path, _MARK))
        for kind, token in LEAF_TOKENS.items():
            yield f"{'.'.join(map(str, path))}={kind}", marked.replace(json.dumps(_MARK), token)
    for path in _objects(value)[:MAX_LEAVES]:
        yield f"{'.'.join(map(str, path))} key twice", _first_key_twice(value, path)


def _leaves(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _leaves(v, (*at, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _leaves(v, (*at, i))]
    return [at] if isinstance(value, str | int | float) and not isinstance(value, bool) else []


def _objects(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [at] if isinstance(value, dict) and value else []
    if isinstance(value, dict):
        return found + [p for k, v in value.items() for p in _objects(v, (*at, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _objects(v, (*at, i))]
    return []


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replace(value[head], rest, new)}
    return [_replace(v, rest, new) if i == head else v for i, v in enumerate(value)]


def _first_key_twice(value: Any, path: tuple[Any, ...]) -> str:
    """``value`` as JSON text whose object at ``path`` names its first key twice."""
    target = value
    for step in path:
        target = target[step]
    key = next(iter(target))
    marked = json.dumps(_replace(value, path, {_MARK: 0, **target}))
    twice = f"{json.dumps(key)}: {json.dumps(target[key])}"
    return marked.replace(f"{json.dumps(_MARK)}: 0", twice, 1)
