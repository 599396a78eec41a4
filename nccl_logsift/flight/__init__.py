"""PyTorch Flight Recorder dumps: read them safely, table them, and say what the next run should capture.

| module | what |
|---|---|
| ``dump`` | sniff a file by content; load a pickle (restricted: no class is ever built) or JSON dump |
| ``table`` | dumps → the ``flight_recorder``, ``flight_dumps`` and ``flight_pg_status`` tables |
| ``discover`` | dumps among the PATH arguments, named by log lines, or at PyTorch's default prefix |
| ``audit`` | which ranks dumped, which should have, where the dumps went |
| ``advisor`` | what this job's input lacks, as settings for the next run |

The format is PyTorch's (``torch/csrc/distributed/c10d/FlightRecorder.hpp``: ``version``, ``pg_config``,
``pg_status``, ``comm_lib_version`` (``nccl_version`` before 2.10), ``entries``); the cross-rank comparison
follows ``torch/distributed/flight_recorder/components/builder.py`` (entries of one process group, matched
by ``collective_seq_id``), without its code.
"""
