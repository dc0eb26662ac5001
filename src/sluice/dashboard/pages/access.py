"""Access control (ACL 2.0): the users and their rules; a super user makes and removes them here too."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from sluice.client.auth_admin import policy_entry
from sluice.common.errors import ClientError
from sluice.dashboard.app import admin_of, confirm, done, form_of, render, require_action

USER_TYPES = ("Normal", "Super")
ACTIONS = ("Pub", "Sub", "Create", "Update", "Delete", "Get", "List", "All")


async def access(request: web.Request) -> web.Response:
    admin = admin_of(request)
    error = ""
    users: list[dict[str, Any]] = []
    acls: list[dict[str, Any]] = []
    try:
        users, acls = await asyncio.gather(admin.list_users(), admin.list_acls())
    except ClientError as exc:
        if getattr(exc, "code", None) == 16:
            raise
        error = str(exc)
    shown = [{k: v for k, v in u.items() if k != "password"} for u in users]  # (never shown, never sent)
    rules = [{"subject": str(a.get("subject", "")), "policy": str(p.get("policyType", "")),
              "resource": str(e.get("resource", "")), "actions": list(e.get("actions") or []),
              "decision": str(e.get("decision", "")), "source_ips": list(e.get("sourceIps") or [])}
             for a in acls for p in (a.get("policies") or []) for e in (p.get("entries") or [])]
    return render(request, "access.html", users=shown, rules=rules, error=error, user_types=USER_TYPES,
                  actions=ACTIONS)


async def create_user(request: web.Request) -> web.Response:
    require_action(request, "make users")
    fields = await form_of(request, "a user creation")
    name, user_type = fields.get("username", "").strip(), fields.get("user_type", "Normal")
    if fields.get("confirmed") != "1":
        return confirm(request, f"Make user {name} ({user_type})?", fields, back="/acl")
    await admin_of(request).create_user(name, fields.get("password", ""), user_type)
    done(request, "/acl", f"User {name} was made.")


async def delete_user(request: web.Request) -> web.Response:
    require_action(request, "delete users")
    fields = await form_of(request, "a user deletion")
    name = fields.get("username", "")
    if fields.get("confirmed") != "1":
        return confirm(request, f"Delete user {name} and its rules?", fields, back="/acl")
    await admin_of(request).delete_user(name)
    done(request, "/acl", f"User {name} was deleted.")


async def create_rule(request: web.Request) -> web.Response:
    require_action(request, "change rules")
    fields = await form_of(request, "a rule")
    subject, resource = fields.get("subject", "").strip(), fields.get("resource", "").strip()
    actions, decision = fields.get("actions", "").strip(), fields.get("decision", "Allow")
    ips = [i.strip() for i in fields.get("source_ips", "").split(",") if i.strip()]
    if fields.get("confirmed") != "1":
        return confirm(request, f"{decision} {actions} on {resource} to {subject}?", fields, back="/acl")
    await admin_of(request).create_acl(subject, [policy_entry(resource, actions, decision, ips)])
    done(request, "/acl", f"{subject}: {decision} {actions} on {resource}.")


async def delete_rule(request: web.Request) -> web.Response:
    require_action(request, "change rules")
    fields = await form_of(request, "a rule deletion")
    subject, resource = fields.get("subject", ""), fields.get("resource", "")
    if fields.get("confirmed") != "1":
        return confirm(request, f"Remove {subject}'s rule on {resource}?", fields, back="/acl")
    await admin_of(request).delete_acl(subject, resource)
    done(request, "/acl", f"{subject}'s rule on {resource} was removed.")


def routes(router: web.UrlDispatcher) -> None:
    router.add_get("/acl", access)
    router.add_post("/acl/users", create_user)
    router.add_post("/acl/users/delete", delete_user)
    router.add_post("/acl/rules", create_rule)
    router.add_post("/acl/rules/delete", delete_rule)
