"""Property: whatever damage a log has, the analysis raises nothing and every line is accounted for.

Mutants of the small fixtures (byte flips, truncation, NUL runs, CRLF, trailing blanks, ANSI colour on whole
lines, no final newline), several at once. For each: ``analyze`` returns a report (or says nothing could be
read), and the parse has a ``lines`` row for every line number from 1 to the input's line count, which is
what an independent count of the bytes says; bytes not read as lines are named by a problem.
"""

from __future__ import annotations

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="the test extra installs hypothesis")
from conftest import FIXTURES  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from nccl_logsift.errors import InputError  # noqa: E402
from nccl_logsift.io.lines import BINARY_SNIFF_BYTES, binary_reason  # noqa: E402
from nccl_logsift.pipeline import ParseOptions, analyze, parse_paths  # noqa: E402
from nccl_logsift.tables import MemorySink  # noqa: E402

SMALL = [p for p in sorted(FIXTURES.glob("*.log")) if p.stat().st_size < 100_000]
TEXTS = {p.name: p.read_bytes() for p in SMALL}


def _flip(data: bytes, at: int, byte: int) -> bytes:
    at %= max(len(data), 1)
    return data[:at] + bytes([byte]) + data[at + 1 :]


def _nul_run(data: bytes, at: int, size: int) -> bytes:
    at %= max(len(data), 1)
    return data[:at] + b"\0" * size + data[at:]


def _ansi(data: bytes) -> bytes:
    return b"\n".join(b"\x1b[31m" + line + b"\x1b[0m" if line else line for line in data.split(b"\n"))


MUTATIONS = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 1 << 20), st.integers(0, 255)),
    st.tuples(st.just("truncate"), st.floats(0.0, 1.0)),
    st.tuples(st.just("nul_run"), st.integers(0, 1 << 20), st.integers(1, 5000)),
    st.tuples(st.just("crlf")),
    st.tuples(st.just("trailing_blanks"), st.sampled_from([b" ", b"\t", b" \t ", b"\r"])),
    st.tuples(st.just("ansi")),
    st.tuples(st.just("no_final_newline")),
    st.tuples(st.just("nul_padding"), st.integers(1, 8192)),
)


def mutate(data: bytes, mutation: tuple) -> bytes:
    match mutation:
        case ("flip", at, byte):
            return _flip(data, at, byte)
        case ("truncate", share):
            return data[: int(len(data) * share)]
        case ("nul_run", at, size):
            return _nul_run(data, at, size)
        case ("crlf",):
            return data.replace(b"\n", b"\r\n")
        case ("trailing_blanks", blank):
            return data.replace(b"\n", blank + b"\n")
        case ("ansi",):
            return _ansi(data)
        case ("no_final_newline",):
            return data.rstrip(b"\n")
        case ("nul_padding", size):
            return data + b"\0" * size
    raise AssertionError(mutation)


def expected_lines(data: bytes) -> int:
    """The line count of ``data`` read as the reader reads it, counted here with plain bytes operations."""
    if binary_reason(data[:BINARY_SNIFF_BYTES], whole=len(data) <= BINARY_SNIFF_BYTES):
        return 0
    if b"\n" not in data[: 4 << 20] and b"\r" in data[: 4 << 20]:
        data = data.replace(b"\r", b"\n")
    data = data.rstrip(b"\0")
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


@settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(sorted(TEXTS)), mutations=st.lists(MUTATIONS, min_size=1, max_size=3))
def test_every_line_of_a_damaged_log_is_accounted_for(tmp_path_factory, name, mutations):
    data = TEXTS[name]
    for mutation in mutations:
        data = mutate(data, mutation)
    path = tmp_path_factory.mktemp("mutant") / name
    path.write_bytes(data)
    lines = expected_lines(data)
    try:
        report = analyze([str(path)], views=False)
    except InputError:
        assert lines == 0
        return
    (given_input,) = report.inputs
    assert given_input.lines == lines and given_input.bytes == len(data)
    sink = MemorySink({"lines": ["line_no"]})
    summary = parse_paths([str(path)], sink, ParseOptions(keep_text=False))
    numbers = sink.tables["lines"]["line_no"]
    assert summary.inputs[0].lines == lines
    assert numbers.n_unique() == lines and numbers.min() == 1 and numbers.max() == lines
    kinds = {p.kind.value for p in given_input.problems}
    assert kinds <= {"nul_padded", "invalid_utf8"}  # a plain file is read to its end
    assert ("nul_padded" in kinds) >= data.endswith(b"\0")  # padding at the end is always left out and said
