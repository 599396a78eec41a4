"""Rules about where ranks run: CUDA errors and OOM, two ranks on one GPU, two machines under one name
(LS4xx).

| code | name | kind | severity |
|---|---|---|---|
| LS401 | cuda-error | cuda_error | critical |
| LS402 | duplicate-gpu | duplicate_gpu | critical |
| LS403 | host-collision | host_collision | critical |

A CUDA failure is reported on the rank that logged it; what its peers log afterwards (``Connection closed
by remote peer``, ``-> 6`` remote-error chains) is fallout and never names them. GPUs are compared by PCI
busId (NVML index before 2.5.6) within one host; a host is a host name *and* a bootstrap address, so two
machines that share a name are told apart (LS403) instead of looking like one machine with shared GPUs.
"""

from __future__ import annotations

from nccl_logsift.findings.placement.cuda_error import CudaError
from nccl_logsift.findings.placement.duplicate_gpu import DuplicateGpu
from nccl_logsift.findings.placement.host_collision import HostCollision

RULES = (CudaError, DuplicateGpu, HostCollision)
