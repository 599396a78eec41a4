"""LS102 collective-mismatch from TORCH_DISTRIBUTED_DEBUG=DETAIL fingerprint reports (ProcessGroupWrapper)."""

from __future__ import annotations

import pytest
from builders import run, simulate

from nccl_logsift.findings.progress.collective_mismatch import CollectiveMismatch
from nccl_logsift.model import Kind, Severity
from nccl_logsift.pipeline import analyze, load_job
from nccl_logsift.render.json import to_dict

DEVICE = (
    "TensorOptions(dtype=float (default), device=cuda, layout=Strided (default), requires_grad=false "
    "(default), pinned_memory=false (default), memory_format=(nullopt))"
)


def fp(seq, op, shape, dtype="Float"):
    return (
        f"CollectiveFingerPrint(SequenceNumber={seq}, OpType={op}, TensorShape=[{shape}], "
        f"TensorDtypes={dtype}, TensorDeviceTypes={DEVICE})"
    )


def report(rank, mine, peer, theirs, label=""):
    return (
        f"{label}RuntimeError: Detected mismatch between collectives on ranks. Rank {rank} is running "
        f"collective: {mine}, but Rank {peer} is running collective: {theirs}."
    )


# Each PyTorch release prints the fingerprints its own way (1.13: no SequenceNumber; 2.0: the peer's without
# tensors; 2.1+: a diff appended); the layouts carry the reports with and without launcher labels.
@pytest.mark.parametrize(
    "layout,nccl,torch",
    [
        ("interleaved", "2.10", "1.13"),
        ("torchrun", "2.14", "2.0"),
        ("srun", "2.18", "2.1"),
        ("mpirun", "2.27", "2.8"),
        ("per-rank", "2.21", "2.5"),
    ],
)
def test_the_odd_rank_of_simulated_detail_reports_is_the_primary_mismatch(tmp_path, layout, nccl, torch):
    out, truth = tmp_path / "job", tmp_path / "truth.json"
    from nccl_logsift.simulate import Options, write

    sim = write(
        Options(scenario="debug-mismatch", layout=layout, nccl_version=nccl, torch_version=torch, seed=5),
        str(out),
        str(truth),
    )
    culprits = next(f["ranks"] for f in sim.truth["faults"] if f["primary"])
    report_ = to_dict(analyze([str(out)]))
    primaries = [(f["code"], f["kind"], f["ranks"]) for f in report_["findings"] if f["primary"]]
    assert primaries == [("LS102", "collective_mismatch", culprits)]
    exits = [f for f in report_["findings"] if f["kind"] == "process_exit"]
    assert exits and not any(f["primary"] for f in exits)


def test_with_two_ranks_both_sides_are_named(tmp_path):
    job, truth = simulate(tmp_path, "debug-mismatch", ranks=2, seed=1)
    (found,) = run(CollectiveMismatch, job)
    assert found.ranks == (0, 1) == tuple(truth["faults"][0]["ranks"])
    assert "no majority" in found.title and found.severity is Severity.CRITICAL


def test_the_odd_rank_is_found_when_only_its_peers_reported(tmp_path):
    # The launcher killed rank 2 before it printed: the three reports that name it still outvote it.
    usual, odd = fp(7, "ALLREDUCE", "4096"), fp(7, "_ALLGATHER_BASE", "1024")
    log = tmp_path / "peers.log"
    log.write_text("\n".join(report(r, usual, 2, odd) for r in (0, 1, 3)) + "\n")
    (found,) = run(CollectiveMismatch, load_job([str(log)]))
    assert found.ranks == (2,) and found.op == "_ALLGATHER_BASE" and found.seq == 7
    assert (
        "rank(s) 2 ran _ALLGATHER_BASE(shape [1024], Float) while 3 rank(s) ran ALLREDUCE(shape [4096], "
        "Float)" in found.title
    )


def test_group_ranks_are_mapped_to_global_ranks_by_the_launcher_labels(tmp_path):
    # A 4-rank data-parallel group of global ranks 4, 6, 8, 10: PyTorch prints group ranks, the labels say
    # whose.
    usual, odd = fp(3, "ALLREDUCE", "512"), fp(4, "ALLREDUCE", "512")
    lines = [
        report(0, usual, 2, odd, "[rank4]: "),
        report(1, usual, 2, odd, "[rank6]: "),
        report(2, odd, 0, usual, "[rank8]: "),
        report(3, usual, 2, odd, "[rank10]: "),
    ]
    log = tmp_path / "group.log"
    log.write_text("\n".join(lines) + "\n")
    (found,) = run(CollectiveMismatch, load_job([str(log)]))
    assert found.ranks == (8,) and found.kind is Kind.COLLECTIVE_MISMATCH
    assert "ALLREDUCE(shape [512], Float) at SequenceNumber 4" in found.title


def test_a_report_without_fingerprints_is_not_a_finding(tmp_path):
    log = tmp_path / "other.log"
    log.write_text(
        "RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running all_reduce but "
        "Rank 1 is not\n"
    )
    assert run(CollectiveMismatch, load_job([str(log)])) == []
