"""A per-job task whose worker dies on jobs named ``*killed*``, as one killed for memory would (imported by
pool workers)."""

import os

from nccl_logsift.batch.task import run_job


def run_or_die(job, out, with_tables):
    if "killed" in job.job_id:
        os._exit(137)
    return run_job(job, out, with_tables)
