import shutil

from nccl_logsift.grammar.registry import grammar_root


def copy_grammars(tmp_path):
    target = tmp_path / "grammars"
    shutil.copytree(grammar_root(), target)
    return target


def test_grammar_check_passes_on_shipped_grammars(run_cli):
    result = run_cli("grammar", "check")
    assert result.exit_code == 0 and "all parse as declared" in result.output


def test_grammar_check_reports_wrong_expectation_with_file_and_sample(tmp_path):
    import subprocess
    import sys

    root = copy_grammars(tmp_path)
    coll = root / "nccl" / "coll.toml"
    coll.write_text(coll.read_text().replace("opcount = 420", "opcount = 421"))
    proc = subprocess.run(
        [sys.executable, "-m", "nccl_logsift", "grammar", "check", "--dir", str(root)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "grammars/nccl/coll.toml: sample 0: opcount: expected 421, parsed 420" in proc.stderr


def test_grammar_check_rejects_look_around(tmp_path):
    import subprocess
    import sys

    root = copy_grammars(tmp_path)
    coll = root / "nccl" / "coll.toml"
    coll.write_text(
        coll.read_text().replace("^(?P<op>[A-Za-z]+): opCount", "^(?P<op>[A-Za-z]+)(?=:): opCount", 1)
    )
    proc = subprocess.run(
        [sys.executable, "-m", "nccl_logsift", "grammar", "check", "--dir", str(root)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "look-ahead is not supported by polars" in proc.stderr
