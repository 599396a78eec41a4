"""healthy: every rank initialises, trains and exits cleanly. No faults."""

from nccl_logsift.simulate.scenarios import Scenario


def inject(job) -> None:
    pass


def truth(job, timeline) -> None:
    pass


SCENARIO = Scenario(
    "healthy", "every rank trains and exits cleanly; the baseline with no faults", inject, truth
)
