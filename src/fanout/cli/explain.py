"""``fanout explain --relay URL``: EXPLAIN a view against a running relay, through its admin API
(``GET /v1/admin/explain``, a token with role ``admin`` when the relay checks tokens).

Prints what the relay holds of the dataset, which of it covers the view, what it would acquire
for it (the planner's dry run: nothing is acquired), the rules that narrowed it, and its cost;
``--json`` prints the relay's answer as it is. docs/cli.md, "explain".
"""

from __future__ import annotations

import argparse
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from fanout.cli import security
from fanout.errors import FanoutError, InvalidView, Unauthorized

#: Seconds the relay has to answer.
TIMEOUT = 30.0


def run(args: argparse.Namespace) -> int:
    """Ask the relay and print its answer; returns the exit status.

    Raises:
        InvalidView: the relay refused the view (400). Unauthorized: the token (401, 403).
        FanoutError: another refusal. OSError: the relay cannot be reached.
    """
    said = ask(args.relay, _query(args), security.token(args), args.tls_ca)
    print(json.dumps(said) if args.json else render(said))
    return 0


def _query(args: argparse.Namespace) -> str:
    pairs = [("dataset", args.dataset), ("view", args.view), ("rate", str(args.rate))]
    pairs += [("rule", rule) for rule in args.rule]
    return urllib.parse.urlencode(pairs)


def ask(relay: str, query: str, token: str, tls_ca: Any = None) -> dict[str, Any]:
    """The relay's answer to ``GET /v1/admin/explain?query`` (``relay``: its ws(s):// or
    http(s):// URL)."""
    parts = urllib.parse.urlsplit(relay)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    url = f"{scheme}://{parts.netloc}/v1/admin/explain?{query}"
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    context = ssl.create_default_context(cafile=tls_ca) if scheme == "https" else None
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT, context=context) as answer:
            return json.loads(answer.read())  # type: ignore[no-any-return]
    except urllib.error.HTTPError as exc:
        raise _refusal(exc) from None


def _refusal(exc: urllib.error.HTTPError) -> FanoutError:
    try:
        body = json.loads(exc.read())
        code, message = body["error"], body["message"]
    except (ValueError, KeyError, TypeError):
        code, message = "error", f"the relay answered {exc.code} {exc.reason}"
    said = f"the relay refused ({exc.code} {code}): {message}"
    if exc.code in (401, 403):
        return Unauthorized(code, said)
    if code == "invalid_view":
        return InvalidView(said)
    return FanoutError(said)


def render(said: dict[str, Any]) -> str:
    """The relay's answer as readable lines."""
    lines = [f"EXPLAIN {said['dataset']} view {said['view']} at the relay"]
    if said["narrowed"]:
        lines.append(f"effective view under the rules: {said['effective_view']}")
    held = said["held"]
    lines.append(f"held ({len(held)}):" if held else "held: nothing")
    lines += [
        f"  #{p['prim']} {p['dataset']} {p['view']}{'' if p['ready'] else ' (not ready)'}"
        for p in held
    ]
    covering = ", ".join(f"#{prim}" for prim in said["covered_by"]) or "nothing"
    lines.append(f"covered by: {covering}")
    lines.append("result: covered" if said["covered"] else "result: not covered")
    residual = said["residual"]
    lines.append(f"would acquire ({len(residual)}):" if residual else "would acquire: nothing")
    lines += [f"  {piece['dataset']} {piece['view']}" for piece in residual]
    cost = said["cost"]
    lines.append(
        f"cost: {cost['rows']} rows inside, ~{cost['bytes_per_push']} bytes a full push, at most"
        f" {cost['pushes_per_second']:g} pushes/s: ~{cost['bytes_per_second']:.0f} bytes/s"
    )
    links = said.get("links")
    if links is not None:  # relay/core/links.py: connections whose pushes are paced to their link
        lines.append(f"links fitted to their drain rate: {links['fitted']} of {links['probed']}")
        lines += [
            f"  client {x['client']}{_on(x)}: ~{x['paced_bytes_per_second']:.0f} bytes/s,"
            f" {x['pushes_per_second']:.2g} pushes/s of this view, {x['detail']} detail"
            for x in links["fitted_links"]
        ]
    for worker in said.get("workers", []):  # a relay with workers: each one's own coverage
        covering = ", ".join(f"#{prim}" for prim in worker["covered_by"]) or "nothing"
        served = "covered" if worker["covered"] else "not covered"
        asks = len(worker["residual"])
        lines.append(
            f"worker {worker['worker']}: {served} (by {covering}), would ask the leader for"
            f" {asks} piece{'' if asks == 1 else 's'}"
        )
    if said.get("workers_unanswered"):
        lines.append(f"workers that did not answer: {said['workers_unanswered']}")
    return "\n".join(lines)


def _on(link: dict[str, Any]) -> str:
    """Which process a fitted link is on, in a relay with workers (0: the leader)."""
    if "worker" not in link:
        return ""
    return " on the leader" if link["worker"] == 0 else f" on worker {link['worker']}"
