"""Rules about processes that died (LS5xx).

| code | name | kind | severity |
|---|---|---|---|
| LS501 | process-exit | process_exit | critical |

Exit reports come from the launchers (torchrun's ChildFailedError summary and elastic agent, srun, bash job
control, Cray PALS, mpirun, torch.multiprocessing.spawn) and are folded into one row per failed process by
:func:`nccl_logsift.resolve.exits.assemble_exits`. A process is named by its global rank when the report or
the NCCL lines allow it. The helpers here that give any table row the global rank of its process
(:func:`with_job_rank`) are shared by the other families of this package.
"""

from __future__ import annotations

from nccl_logsift.findings.base import Rule
from nccl_logsift.findings.process.process_exit import ProcessExit

RULES: tuple[type[Rule], ...] = (ProcessExit,)
