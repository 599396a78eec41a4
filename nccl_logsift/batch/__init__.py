"""Batch analysis of an archive of job logs: every job on its own, one dataset and one fleet view.

    ARCHIVE… → archive (find jobs, fingerprint inputs) → run (skip jobs already analysed)
             → engines (process pool | Ray) → task (``pipeline.analyze`` per job, rows written by the worker)
             → dataset (Hive-partitioned Parquet) → fleet (polars over the dataset → FleetSummary)

Each job is analysed exactly as ``logsift analyze`` would analyse it; the batch only decides which jobs
to run, where, and where their rows go. Kept free of heavy imports: pool workers import this package
before they know how many threads polars may use.
"""
