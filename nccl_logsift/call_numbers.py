"""What a call number (``#881``) means, said once: ``logsift explain --numbering`` prints it, the README
quotes it (a test holds the two together), and the terminal's rank table and the HTML grid end with its
one-line form.

Every finding, table and view names a collective by this number: ``position + 1`` of
findings/progress.py ``positioned`` on a communicator, a PyTorch work's SeqNum in a process group.
"""

from __future__ import annotations

LEGEND = "#n: the n-th collective call on its communicator (logsift explain --numbering)"

EXPLANATION = """\
Call numbers
  A collective is named by its call number: #881 is the 881st collective call
  on its communicator (NCCL) or process group (PyTorch), counted from 1 on each
  rank. Ranks are compared by it: a rank whose last call is #880 while its
  peers went on to #881 never made call #881.

  NCCL     logsift numbers each rank's COLL lines ("AllReduce: opCount 370 ...")
           on each communicator. Where opCount counts the calls (it rises with
           every call on every member), #n is opCount + 1, opCount being hex:
           opCount 370 is #881. Elsewhere #n is the rank's n-th COLL line on
           that communicator, because opCount does not count calls there: NCCL
           2.8 does not, a group of calls shares one, and from 2.27 it stays 0
           on a single node.
  PyTorch  #n is the work's SeqNum in its process group: WorkNCCL(SeqNum=881,
           ...) and "last enqueued NCCL work: 881" are #881.

  The two often agree on the default process group, but one PyTorch work can
  issue several NCCL calls (coalesced collectives), so numbers are compared
  within one communicator or one process group only."""
