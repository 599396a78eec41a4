"""Rules about NCCL errors no more specific rule explains (LS9xx).

| code | name | kind | severity |
|---|---|---|---|
| LS901 | nccl-error | nccl_error | error |
| LS902 | nccl-tests-failure | nccl_error | critical |

The ``errors`` table holds every NCCL WARN (a catch-all keeps the text of those no pattern knows) and the
``file:line -> N`` return-code chains that follow them (grammar §1.9, §7). Error kinds other rules own are
left to them: IB, socket and OFI errors (LS302), CUDA and memory (LS401), bootstrap and interfaces (LS202,
LS203), duplicate GPUs (LS402), CollNet/NVLS/P2P/plugin fallbacks (LS301).
"""

from __future__ import annotations

from nccl_logsift.findings.base import Rule
from nccl_logsift.findings.nccl.nccl_error import NcclError
from nccl_logsift.findings.nccl.nccl_tests_failure import NcclTestsFailure

RULES: tuple[type[Rule], ...] = (NcclError, NcclTestsFailure)
