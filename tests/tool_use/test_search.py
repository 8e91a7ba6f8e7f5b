"""The search tool: passages ranked by BM25, an index that persists and knows when it is stale, queries
that cannot speak FTS5, and every bad input a clear error."""

import asyncio
import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from recipes_lib.exceptions import ConfigurationError, DataFormatError
from renderers import ToolCall
from tool_use import SearchIndex, SearchTool, ToolErrorKind, ToolResult, handle_tool_call
from tool_use.search import QueryError, fts_query, split_passages

TEA = """# Tea

Green tea is steamed or pan-fired soon after picking, so its leaves stay green.

Black tea is fully oxidised before it is dried, which darkens the leaves."""
VOLCANO = "Volcanoes erupt when magma rises through the crust.\n\nThe lava cools into basalt."
ALPS = "Mont Blanc is the highest mountain of the Alps.\n\nThe Matterhorn stands above Zermatt."


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    notes = tmp_path / "notes"
    (notes / "geo").mkdir(parents=True)
    (notes / "tea.md").write_text(TEA, encoding="utf-8")
    (notes / "volcano.txt").write_text(VOLCANO, encoding="utf-8")
    (notes / "geo" / "alps.md").write_text(ALPS, encoding="utf-8")
    (notes / "script.py").write_text("print('green tea')", encoding="utf-8")  # not a .txt or .md: skipped
    return notes


@pytest.fixture
def index(corpus: Path) -> SearchIndex:
    return SearchIndex.build(corpus, max_passage_chars=80)


def _found(index: SearchIndex, query: str, k: int = 5) -> list[tuple[str, int]]:
    return [(passage.path, passage.number) for passage in index.query(query, k)]


def _call(tools: SearchTool, arguments: dict[str, Any] | str) -> ToolResult:
    return asyncio.run(handle_tool_call([tools.search], ToolCall.of("search", arguments, id="call_3")))


def test_paragraphs_join_while_they_fit_and_long_ones_split_at_spaces() -> None:
    assert split_passages("one\n\ntwo\n  \nthree", max_chars=10) == ["one\n\ntwo", "three"]
    assert split_passages("alpha beta gamma", max_chars=10) == ["alpha beta", "gamma"]
    assert split_passages("abcdefghijkl", max_chars=5) == ["abcde", "fghij", "kl"]
    assert split_passages(" \n\n \n") == []


def test_passages_keep_their_file_path_and_number(index: SearchIndex) -> None:
    [passage] = index.query("Matterhorn")
    assert (passage.path, passage.number) == ("notes/geo/alps.md", 2)
    assert passage.text == "The Matterhorn stands above Zermatt." and passage.score > 0
    assert _found(index, "basalt magma") == [("notes/volcano.txt", 1)]  # both paragraphs fit in one passage
    assert index.query("print") == []  # script.py was not indexed


def test_the_passage_holding_the_querys_words_ranks_first(index: SearchIndex) -> None:
    assert _found(index, "black tea leaves") == [("notes/tea.md", 3), ("notes/tea.md", 2), ("notes/tea.md", 1)]
    assert _found(index, "which leaves are green?")[0] == ("notes/tea.md", 2)
    assert _found(index, "highest mountain in the Alps")[0] == ("notes/geo/alps.md", 1)


def test_k_bounds_the_number_of_passages(index: SearchIndex) -> None:
    assert len(index.query("tea the", k=5)) == 5
    assert _found(index, "tea the", k=2) == _found(index, "tea the", k=5)[:2]
    with pytest.raises(QueryError, match="k must be at least 1; got 0"):
        index.query("tea", k=0)


@pytest.mark.parametrize(("query", "fts"), [
    ('say "hi', '"say" OR "hi"'),
    ("gre*", '"gre"'),
    ("NEAR(green tea, 2)", '"near" OR "green" OR "tea" OR "2"'),
    ("green AND NOT tea", '"green" OR "and" OR "not" OR "tea"'),
    ("-green +tea ^black", '"green" OR "tea" OR "black"'),
    ("((green) tea", '"green" OR "tea"'),
    ("text: green", '"text" OR "green"'),
    ("snake_case Tea TEA", '"snake" OR "case" OR "tea"'),
    ("cafe\u0301", '"café"'),
], ids=["quote", "star", "NEAR", "AND NOT", "minus", "parens", "column filter", "underscore and repeats", "NFC"])
def test_queries_are_quoted_words_joined_by_or(query: str, fts: str) -> None:
    assert fts_query(query) == fts


@pytest.mark.parametrize("query", ["", "   ", '"', "*", "()", "-", "_", "\"')(*"])
def test_a_query_without_words_is_refused(query: str) -> None:
    with pytest.raises(QueryError, match="has no words to search for"):
        fts_query(query)


@pytest.mark.parametrize("query", ['"', '"green', "*", "tea*", "NEAR(green", "NEAR(green, tea)", "AND", "green AND",
                                   "OR tea", "-tea", "- -", "((tea", "tea))", "green) OR (", "passages: tea",
                                   "{path number}: x", "", "   "])
def test_no_query_breaks_the_tool(index: SearchIndex, query: str) -> None:
    result = _call(SearchTool(index), {"query": query})
    assert result.error in (None, ToolErrorKind.FAILED)
    if result.error:
        assert result.messages[0]["content"] == f"Error: the query {query!r} has no words to search for"


def test_the_tool_answers_a_call_with_ranked_excerpts(index: SearchIndex) -> None:
    result = _call(SearchTool(index, max_excerpt_chars=20), {"query": "green tea", "k": 2})
    [message] = result.messages
    assert message["tool_call_id"] == "call_3" and message["name"] == "search"
    assert json.loads(message["content"]) == [
        {"path": "notes/tea.md", "passage": 2, "text": "Green tea is steame…"},
        {"path": "notes/tea.md", "passage": 1, "text": "# Tea"},
    ]
    assert result.error is None and result.metrics == {"hits": 2.0}


def test_no_match_is_an_answer_not_an_error(index: SearchIndex) -> None:
    result = _call(SearchTool(index), {"query": "quantum chromodynamics"})
    assert result.error is None and result.metrics == {"hits": 0.0}
    assert result.messages[0]["content"] == "No passage matches 'quantum chromodynamics'."


@pytest.mark.parametrize(("arguments", "text"), [
    ({"query": "tea", "k": 0}, "'k': input should be greater than or equal to 1"),
    ({"query": "tea", "k": 11}, "'k': input should be less than or equal to 10"),
    ({"k": 3}, "'query' is missing"),
])
def test_bad_arguments_are_error_results(index: SearchIndex, arguments: dict[str, Any], text: str) -> None:
    result = _call(SearchTool(index), arguments)
    assert result.error == ToolErrorKind.BAD_ARGUMENTS and text in result.messages[0]["content"]


def test_the_tool_declares_its_arguments(index: SearchIndex) -> None:
    spec = SearchTool(index).search.to_spec()
    assert spec["name"] == "search"
    assert spec["parameters"]["properties"]["k"] == {"type": "integer", "minimum": 1, "maximum": 10, "default": 5,
                                                     "description": "how many passages to return"}
    assert spec["parameters"]["required"] == ["query"]


def test_unicode_text_matches_without_case_or_accents(tmp_path: Path) -> None:
    (tmp_path / "cities.md").write_text(
        "Le café de Zürich.\n\nΑΘΗΝΑ, πρωτεύουσα.\n\nМосква — столица.\n\n東京 首都", encoding="utf-8")
    index = SearchIndex.build(tmp_path / "cities.md", max_passage_chars=20)  # a passage a paragraph
    assert _found(index, "CAFE zurich") == [("cities.md", 1)]
    assert _found(index, "αθηνα") == [("cities.md", 2)]
    assert _found(index, "москва?") == [("cities.md", 3)]
    assert _found(index, "東京") == [("cities.md", 4)]
    content = _call(SearchTool(index), {"query": "Москва"}).messages[0]["content"]
    assert "Москва — столица." in content  # written as is, not \\u escapes


def test_an_index_file_reopens_with_the_same_results(corpus: Path, tmp_path: Path) -> None:
    db = tmp_path / "notes.sqlite"
    built = SearchIndex.build([corpus], db, max_passage_chars=80)
    reopened = SearchIndex.open(db)
    for query in ("black tea leaves", "Zermatt mountain", "lava"):
        assert reopened.query(query) == built.query(query)
    tool_copy = pickle.loads(pickle.dumps(SearchTool(reopened).search))  # e.g. into a worker process
    result = asyncio.run(handle_tool_call([tool_copy], ToolCall.of("search", {"query": "lava"})))
    assert result.metrics == {"hits": 1.0}


def test_an_in_memory_index_does_not_pickle(index: SearchIndex) -> None:
    with pytest.raises(TypeError, match="An in-memory SearchIndex cannot be pickled"):
        pickle.dumps(index)


def test_opening_a_stale_index_names_what_changed_and_building_again_refreshes_it(corpus: Path,
                                                                                 tmp_path: Path) -> None:
    db = tmp_path / "notes.sqlite"
    SearchIndex.build(corpus, db)
    (corpus / "tea.md").write_text(TEA + "\n\nOolong is partly oxidised.", encoding="utf-8")
    (corpus / "volcano.txt").unlink()
    (corpus / "geo" / "new.txt").write_text("A new note.", encoding="utf-8")
    message = ("out of date: notes/geo/new.txt (added), notes/tea.md (changed), notes/volcano.txt (removed). "
               "Build it again")
    with pytest.raises(DataFormatError, match=message.replace("(", r"\(").replace(")", r"\)")):
        SearchIndex.open(db)
    assert SearchIndex.open(db, check_files=False).query("oolong") == []  # the old snapshot, by request
    assert _found(SearchIndex.build(corpus, db), "oolong") == [("notes/tea.md", 1)]
    assert SearchIndex.open(db).stale_files() == []


def test_a_touched_file_is_stale_even_at_the_same_size(corpus: Path, tmp_path: Path) -> None:
    index = SearchIndex.build(corpus, tmp_path / "notes.sqlite")
    stat = (corpus / "tea.md").stat()
    os.utime(corpus / "tea.md", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert index.stale_files() == ["notes/tea.md (changed)"]


@pytest.mark.parametrize(("make", "error", "text"), [
    (lambda root: root / "missing", ConfigurationError, "missing does not exist"),
    (lambda root: _write(root / "data.csv", b"a,b"), ConfigurationError, "data.csv is not a .txt or .md file"),
    (lambda root: root, DataFormatError, "holds no text: no .txt or .md file with words in it"),
    (lambda root: _write(root / "blank.md", b" \n\n \n"), DataFormatError, "holds no text"),
    (lambda root: _write(root / "latin1.txt", "naïve".encode("latin-1")), DataFormatError,
     r"latin1.txt is not UTF-8 text \(byte 2 is 0xef\)"),
], ids=["missing path", "other suffix", "empty folder", "blank file", "not UTF-8"])
def test_bad_corpora_are_refused_naming_the_file(tmp_path: Path, make: Any, error: type[Exception],
                                                 text: str) -> None:
    root = tmp_path / "corpus"
    root.mkdir()
    with pytest.raises(error, match=text):
        SearchIndex.build(make(root), tmp_path / "index.sqlite")
    assert not list(tmp_path.glob("index.sqlite*"))  # no half-built index is left behind


def test_a_non_utf8_file_in_a_folder_is_named(corpus: Path) -> None:
    _write(corpus / "geo" / "old.md", b"\xef\xbb\xbfcaf\xe9")  # the offset counts the byte-order mark
    with pytest.raises(DataFormatError, match=r"notes/geo/old.md is not UTF-8 text \(byte 6 is 0xe9\)"):
        SearchIndex.build(corpus)


def test_a_byte_order_mark_is_dropped(tmp_path: Path) -> None:
    index = SearchIndex.build(_write(tmp_path / "bom.txt", "\ufeffTea".encode()))
    assert [passage.text for passage in index.query("tea")] == ["Tea"]


def test_concurrent_calls_share_one_index(corpus: Path, tmp_path: Path) -> None:
    search = SearchTool(SearchIndex.build(corpus, tmp_path / "notes.sqlite", max_passage_chars=80)).search

    async def calls() -> list[ToolResult]:
        return await asyncio.gather(*(handle_tool_call([search], ToolCall.of("search", {"query": query}))
                                      for query in ["tea", "lava", "Zermatt"] * 4))

    assert [result.metrics["hits"] for result in asyncio.run(calls())] == [3.0, 1.0, 1.0] * 4


def test_opening_or_overwriting_something_else_is_refused(corpus: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="There is no search index at"):
        SearchIndex.open(tmp_path / "nothing.sqlite")
    other = _write(tmp_path / "precious.db", b"not a database at all, but precious")
    with pytest.raises(ConfigurationError, match="precious.db is not a search index"):
        SearchIndex.open(other)
    with pytest.raises(ConfigurationError, match="Refusing to replace .*precious.db: it is not a search index"):
        SearchIndex.build(corpus, other)
    assert other.read_bytes() == b"not a database at all, but precious"
    with pytest.raises(ConfigurationError, match="the folder .* does not exist"):
        SearchIndex.build(corpus, tmp_path / "no" / "index.sqlite")
    with pytest.raises(ConfigurationError, match="needs at least one file or folder"):
        SearchIndex.build([])
    with pytest.raises(ConfigurationError, match="max_passage_chars must be at least 1"):
        SearchIndex.build(corpus, max_passage_chars=0)


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path
