"""The parsed grammar set kept on disk: used when nothing changed, read afresh when anything did."""

import shutil

import pytest

from nccl_logsift.errors import GrammarError
from nccl_logsift.grammar import cache, registry
from nccl_logsift.grammar.cache import cache_dir
from nccl_logsift.grammar.registry import grammar_root
from nccl_logsift.grammar.schema import read_grammar


@pytest.fixture
def grammars(tmp_path, monkeypatch):
    """A copy of the shipped grammars, and a cache directory of this test's own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = tmp_path / "grammars"
    shutil.copytree(grammar_root(), root)
    return root


def load(root):
    """Load as a new process would: without the in-process memo."""
    registry._load.cache_clear()
    return registry.load_grammars(root, check_dialect=False)


def cache_files():
    return sorted(cache_dir().glob("grammars-*.pickle"))


def no_parsing(monkeypatch):
    def fail(path):
        raise AssertionError(f"{path} was parsed, not read from the cache")

    monkeypatch.setattr(registry, "read_grammar", fail)


def test_the_second_load_reads_the_same_set_from_the_cache(grammars, monkeypatch):
    parsed = load(grammars)
    assert len(cache_files()) == 1
    no_parsing(monkeypatch)
    assert load(grammars) == parsed


def test_an_edited_grammar_is_parsed_again(grammars):
    load(grammars)
    coll = grammars / "nccl" / "coll.toml"
    coll.write_text(coll.read_text().replace('title = "', 'title = "edited: ', 1))
    assert load(grammars).family("coll").title.startswith("edited: ")
    assert len(cache_files()) == 1  # one file per grammar directory, overwritten


def test_an_added_or_removed_grammar_is_seen(grammars):
    families = {g.family for g in load(grammars).grammars}
    (grammars / "nccl" / "coll.toml").rename(grammars / "coll.toml.off")
    assert {g.family for g in load(grammars).grammars} == families - {"coll"}
    (grammars / "coll.toml.off").rename(grammars / "text" / "coll.toml")
    assert {g.family for g in load(grammars).grammars} == families


def test_a_broken_grammar_raises_every_time_and_is_not_kept(grammars):
    (grammars / "nccl" / "coll.toml").write_text("this is not toml = = =")
    for _ in range(2):
        with pytest.raises(GrammarError, match="not valid TOML"):
            load(grammars)
    assert cache_files() == []


def test_a_damaged_cache_file_is_replaced(grammars, monkeypatch):
    parsed = load(grammars)
    [file] = cache_files()
    file.write_bytes(file.read_bytes()[:100])
    assert load(grammars) == parsed
    no_parsing(monkeypatch)
    assert load(grammars) == parsed


def test_an_unwritable_cache_directory_only_costs_the_parsing(grammars, tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a-file"))
    assert load(grammars) == load(grammars)


def test_a_requested_dialect_check_never_uses_the_cache(grammars, monkeypatch):
    load(grammars)
    no_parsing(monkeypatch)
    registry._load.cache_clear()
    with pytest.raises(AssertionError, match="was parsed"):
        registry.load_grammars(grammars, check_dialect=True)


def test_a_change_in_the_code_that_reads_grammars_is_a_miss(grammars, tmp_path, monkeypatch):
    reader = tmp_path / "schema.py"
    reader.write_text("# one version of the reader\n")
    monkeypatch.setattr(cache, "_READER", (reader,))
    load(grammars)
    reader.write_text("# another version of the reader\n")
    parsed = []
    monkeypatch.setattr(registry, "read_grammar", lambda path: parsed.append(path) or read_grammar(path))
    load(grammars)
    assert len(parsed) == len(list(grammars.rglob("*.toml")))
