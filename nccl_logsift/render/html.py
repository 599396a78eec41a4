"""Report → one self-contained HTML page: inline CSS, JS and SVG, no request to anywhere.

The page is rendered from Jinja2 templates with autoescaping on, so every value that came from a log
(host names, paths, messages) is escaped; no markup is built by joining strings. Its Content-Security-Policy
allows nothing but the page's own inline style and script, named by their SHA-256 hashes: even markup that
slipped through could neither run a script nor load anything.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import math
from dataclasses import dataclass
from importlib.resources import files
from typing import TYPE_CHECKING, Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from nccl_logsift import __version__, call_numbers
from nccl_logsift.model import HostLink, HostNode, Report, Topology
from nccl_logsift.render.controls import visible
from nccl_logsift.render.json import to_dict

if TYPE_CHECKING:
    from nccl_logsift.batch.fleet import FleetSummary

# Column headers of the grid: short names of NCCL's collectives (ncclFunc_t names as COLL lines print them).
OP_SHORT = {
    "AllReduce": "AR",
    "AllGather": "AG",
    "ReduceScatter": "RS",
    "Broadcast": "BC",
    "Reduce": "Rd",
    "Send": "Snd",
    "Recv": "Rcv",
    "AllToAll": "A2A",
    "Gather": "Ga",
    "Scatter": "Sc",
    "AlltoAll": "A2A",
    "ALLREDUCE": "AR",
    "ALLGATHER": "AG",
    "REDUCE_SCATTER": "RS",
    "BROADCAST": "BC",
    "SEND": "Snd",
    "RECV": "Rcv",
}


def _shown(value: Any) -> Any:
    """Every value a template prints: log text with its control characters shown, not obeyed. Escaping keeps
    markup out, but a bidi override (U+202E) still draws a host name backwards and C0 controls are not text;
    the page shows them as the terminal report does (render/controls.py). Markup of our own is left whole."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return visible(value)
    return value


@functools.cache
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("nccl_logsift.render", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_shown,
    )
    env.filters["op_short"] = lambda op: OP_SHORT.get(op or "", (op or "")[:3])
    env.filters["thousands"] = lambda n: f"{n:,}" if isinstance(n, int) else n
    env.filters["size"] = _size
    env.globals["host_circle"] = host_circle
    env.globals["call_numbers"] = call_numbers.LEGEND  # the terminal's rank table ends with it too
    return env


@functools.cache
def _asset(name: str) -> tuple[Markup, str]:
    """An inline asset of our own (not log text) and its CSP hash source."""
    text = files("nccl_logsift.render").joinpath("templates", name).read_text(encoding="utf-8")
    digest = base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")
    return Markup(text), f"'sha256-{digest}'"


def page_context(title: str) -> dict[str, Any]:
    """What base.html.j2 needs: the title, the inline CSS and JS, and the policy that allows only them."""
    css, css_hash = _asset("report.css")
    js, js_hash = _asset("report.js")
    policy = (
        f"default-src 'none'; style-src {css_hash}; script-src {js_hash}; img-src data:; "
        "base-uri 'none'; form-action 'none'"
    )
    return {"title": title, "css": css, "js": js, "csp": policy, "version": __version__}


def render_html(report: Report) -> str:
    """The report page. The findings contract is embedded too (``<script type="application/json">``)."""
    template = environment().get_template("report.html.j2")
    worst = report.worst_severity
    return template.render(
        **page_context(f"logsift: {report.verdict[:80]}"),
        report=report,
        views=report.views,
        worst=worst.label if worst else "ok",
        contract=to_dict(report),
    )


def render_fleet(summary: FleetSummary) -> str:
    """The fleet page of ``logsift batch``: root causes by kind, culprit hosts/GPUs/NICs, kinds by NCCL
    version."""
    template = environment().get_template("fleet.html.j2")
    return template.render(**page_context(f"logsift fleet: {summary.jobs} jobs"), summary=summary)


@dataclass(frozen=True)
class Drawing:
    """Where the topology diagram puts each host (on a circle) and the chords of the links between them."""

    size: int
    hosts: list[tuple[HostNode, float, float, float, float]]  # host, x, y, label x, label y
    links: list[tuple[HostLink, float, float, float, float]]


MAX_DRAWN_HOSTS = 64


def host_circle(topology: Topology) -> Drawing | None:
    """Hosts evenly on a circle, in rank order, so ring neighbours sit side by side; None for fewer than three
    hosts or more than 64."""
    n = len(topology.hosts)
    if n < 3 or n > MAX_DRAWN_HOSTS:  # two hosts and their link read better as the cards and the table
        return None
    size = 300 if n <= 8 else 520
    centre, radius = size / 2, size / 2 - 70
    at: dict[str, tuple[float, float]] = {}
    hosts = []
    for i, host in enumerate(topology.hosts):
        angle = 2 * math.pi * i / n - math.pi / 2
        x, y = centre + radius * math.cos(angle), centre + radius * math.sin(angle)
        at[host.name] = (x, y)
        hosts.append(
            (
                host,
                x,
                y,
                centre + (radius + 34) * math.cos(angle),
                centre + (radius + 34) * math.sin(angle) + 4,
            )
        )
    links = [(link, *at[link.a], *at[link.b]) for link in topology.links if link.a in at and link.b in at]
    return Drawing(size=size, hosts=hosts, links=links)


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)
