"""The console's API keys page driven through WebTest: a key created and its text read."""

from __future__ import annotations

PAGE = "/console/settings/api-keys"


def create_form(
    app,
    name: str = "pbx",
    days: str = "",
    scopes: tuple[str, ...] = ("read", "write"),
    grants: tuple[str, ...] = ("clinic-a",),
):
    form = new_key_form(app.get(PAGE + "?clinic=clinic-a"))
    form["name"] = name
    if days:
        form["expires_in_days"] = days
    for scope in ("read", "write"):
        form[f"scope_{scope}"] = scope in scopes
    for field in [f for f in form.fields if f and f.startswith("grant_")]:
        form[field] = field.removeprefix("grant_") in grants
    return form


def create(
    app,
    name: str = "pbx",
    days: str = "",
    scopes: tuple[str, ...] = ("read", "write"),
    grants: tuple[str, ...] = ("clinic-a",),
    status: int = 303,
):
    """Create a key; a made key's answer is a 303 to the list, followed (the page that shows
    its secret once)."""
    answer = create_form(app, name, days, scopes, grants).submit(status=status, extra_environ=ADDRESS)
    if status != 303:
        return answer
    assert answer.headers["Location"].endswith(PAGE + "?clinic=clinic-a#new-key-title")
    return answer.follow()


def new_key_form(page):
    return next(f for f in page.forms.values() if f.action == PAGE)


def secret_of(page) -> str:
    return page.html.find("code", {"id": "new-key"}).text


ADDRESS = {"REMOTE_ADDR": "203.0.113.9"}
