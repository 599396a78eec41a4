"""Rules about getting a job started: init that never completed, bootstrap failures, bad interfaces (LS2xx).

| code | name | kind | severity |
|---|---|---|---|
| LS201 | init-incomplete | init_incomplete | critical |
| LS202 | bootstrap-failure | bootstrap_failure | critical |
| LS203 | interface-misconfig | interface_misconfig | error |

Communicator init is judged per communicator (``comm_uid``): one member's ``Init COMPLETE`` means every
member took part in the bootstrap, so ranks can only be "missing" from a communicator that nobody finished.
Init instances are rebuilt here from the Init/Destroy/Abort rows alone, because a summary line between
START and COMPLETE (2.20.3+) would otherwise split one instance in two.

Ranks of processes that never logged an Init line (a rank that failed before Init START) come from PyTorch
or launcher labels, torchrun's failure summary, or, as a last resort, from the ranks the communicator lacks.
The helpers here are shared with the placement rules (LS4xx).
"""

from __future__ import annotations

from nccl_logsift.findings.startup.bootstrap_failure import BootstrapFailure
from nccl_logsift.findings.startup.init_incomplete import InitIncomplete
from nccl_logsift.findings.startup.interface_misconfig import InterfaceMisconfig

RULES = (InitIncomplete, BootstrapFailure, InterfaceMisconfig)
