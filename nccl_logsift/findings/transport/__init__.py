"""Rules about the data path between GPUs: slower transports chosen at init, and network errors (LS3xx).

| code | name | kind | severity |
|---|---|---|---|
| LS301 | transport-fallback | transport_fallback | warning |
| LS302 | net-error | net_error | critical |

Transports are compared across ranks and nodes, because asymmetry is the tell: one node on TCP sockets
while the others use InfiniBand, one rank without GPUDirect RDMA, one host whose GPUs talk through host
memory. A connection line names ranks of its communicator; :func:`transport_rows` maps them to global
ranks and hosts through the communicator instances the line belongs to (grammar §4.1).
"""

from __future__ import annotations

from nccl_logsift.findings.base import Rule
from nccl_logsift.findings.transport.net_error import NetError
from nccl_logsift.findings.transport.transport_fallback import TransportFallback

RULES: tuple[type[Rule], ...] = (TransportFallback, NetError)
