"""Full-text search over local text and Markdown files, as a tool the policy can call.

    index = SearchIndex.build(["notes/", "faq.md"], "notes.sqlite")   # or ":memory:"
    index = SearchIndex.open("notes.sqlite")                           # later, in any process
    tools = [SearchTool(index).search, calculator]

Why SQLite's FTS5: it comes with Python's `sqlite3` (no new dependency); it is a real inverted index
whose `bm25()` ranks the matches; the index is one file on disk that opens at once; and any number of
threads and processes may read it together.

Corpus. `.txt` and `.md` files, read as UTF-8 (a byte-order mark is dropped); a folder is searched
recursively and its other files skipped. Markdown is indexed as written, markup included. Each file
is cut into passages: its paragraphs (split at blank lines) joined while they fit in
`max_passage_chars`, a longer paragraph split at whitespace. A passage keeps its file's path (the file
name for a file given; `<folder name>/<path inside it>` for a file found in a folder given) and its
number in the file, from 1.

Staleness. The index records the paths it was built from and each file's size and modification time.
`SearchIndex.open` looks at them again and refuses an index whose files were changed, added or removed
(a `DataFormatError` naming them); building again is the refresh. As for `make`, an edit that keeps
both a file's size and its time goes unseen: hashing every file at each open would read the corpus.
A build writes a new file that then replaces the old one, so a process that has the old one open
keeps searching its snapshot.
`open(..., check_files=False)` uses an index without its files (copied to another machine, say).

Queries. The model's text never reaches FTS5's query syntax: its words (runs of letters and digits)
are each double-quoted and joined with OR, so `"`, `*`, `NEAR(`, `AND`, `-` and parentheses are plain
text, and BM25 puts the passages that hold more of the words, and rarer ones, first. Case and
diacritics are ignored (`cafe` finds `Café`). Scripts written without spaces (Chinese, Japanese) are
matched by whole runs of characters only: FTS5's `unicode61` tokenizer does not segment them.
"""

import json
import os
import re
import sqlite3
import threading
import unicodedata
from collections.abc import Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import Field

from recipes_lib.exceptions import ConfigurationError, DataFormatError
from tool_use.tools import error_tool_result, simple_tool_result, tool
from tool_use.types import ToolResult

SUFFIXES = (".txt", ".md")
# A few paragraphs: enough context to answer from, while five of them fit `ToolLimits.max_output_chars`.
MAX_PASSAGE_CHARS = 1000
# More passages than this per call would be cut by `ToolLimits.max_output_chars` anyway.
MAX_K = 10
# Far more words than a query needs; bounds the work one call can ask of the index.
MAX_QUERY_WORDS = 64
_FORMAT = "1"  # the layout of the tables below; an index of another layout is refused
_WORD = re.compile(r"[^\W_]+")  # letters and digits, as FTS5's unicode61 tokenizer reads words
_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE files (source TEXT PRIMARY KEY, path TEXT NOT NULL, size INTEGER NOT NULL,
                    mtime_ns INTEGER NOT NULL);
CREATE VIRTUAL TABLE passages USING fts5(text, path UNINDEXED, number UNINDEXED,
                                         tokenize = 'unicode61 remove_diacritics 2');
"""

PathLike = str | os.PathLike[str]


class QueryError(ValueError):
    """A query the index cannot search for; the message is written for the model."""


@dataclass(frozen=True)
class Passage:
    """One passage of the corpus that matched a query.

    Attributes:
        path: the file's path as the index names it (see the module docstring).
        number: the passage's place in its file, from 1.
        score: minus FTS5's `bm25()`; higher is a better match.
    """

    path: str
    number: int
    text: str
    score: float


@dataclass(frozen=True)
class _File:
    source: Path  # absolute, for reading and for the staleness check
    path: str  # the name passages show
    size: int
    mtime_ns: int


class SearchIndex:
    """A read-only FTS5 index of passages; make one with `build` or `open`.

    One connection serves every thread (calls of one turn run in worker threads), under a lock.
    """

    def __init__(self, connection: sqlite3.Connection, db_path: str) -> None:
        self._connection = connection
        self._lock = threading.Lock()
        self.db_path = db_path

    @classmethod
    def build(cls, paths: PathLike | Sequence[PathLike], db_path: PathLike = ":memory:",
              max_passage_chars: int = MAX_PASSAGE_CHARS) -> "SearchIndex":
        """Index the `.txt` and `.md` files at `paths` (files or folders) into `db_path`, replacing
        an index already there.

        Raises:
            ConfigurationError: a path does not exist or is a file of another kind, `db_path` is a
                file that is not a search index, or `max_passage_chars` < 1.
            DataFormatError: a file is not UTF-8, or the files hold no text at all.
        """
        if max_passage_chars < 1:
            raise ConfigurationError(f"max_passage_chars must be at least 1; got {max_passage_chars}.")
        roots = [Path(p).resolve() for p in ([paths] if isinstance(paths, str | os.PathLike) else paths)]
        if not roots:
            raise ConfigurationError("SearchIndex.build needs at least one file or folder to index.")
        files = _corpus_files(roots, missing_ok=False)
        if str(db_path) == ":memory:":
            connection = sqlite3.connect(":memory:", check_same_thread=False)
            _write(connection, roots, files, max_passage_chars)
            return cls(connection, ":memory:")
        target = Path(db_path)
        _check_replaceable(target)
        building = target.with_name(f"{target.name}.building")
        building.unlink(missing_ok=True)
        try:
            with closing(sqlite3.connect(building)) as connection:
                _write(connection, roots, files, max_passage_chars)
            os.replace(building, target)
        finally:
            building.unlink(missing_ok=True)
        return cls.open(target)

    @classmethod
    def open(cls, db_path: PathLike, check_files: bool = True) -> "SearchIndex":
        """The index in the file `db_path`, opened read-only.

        Raises:
            ConfigurationError: `db_path` does not exist or is not a search index.
            DataFormatError: `check_files` and files were changed, added or removed since the build.
        """
        path = Path(db_path).resolve()
        if not path.is_file():
            raise ConfigurationError(f"There is no search index at {db_path}; make one with SearchIndex.build.")
        index = cls(_read_only(path), str(path))
        if check_files and (stale := index.stale_files()):
            index.close()
            raise DataFormatError(f"The search index {db_path} is out of date: {', '.join(stale)}. Build it "
                                  "again with SearchIndex.build.")
        return index

    def query(self, text: str, k: int = 5) -> list[Passage]:
        """The `k` passages that best match the words of `text`, best first ([] when none match).

        Raises:
            QueryError: `text` holds no words, or `k` < 1.
        """
        if k < 1:
            raise QueryError(f"k must be at least 1; got {k}")
        words = fts_query(text)
        with self._lock:
            rows = self._connection.execute(
                "SELECT path, number, text, bm25(passages) FROM passages WHERE passages MATCH ? "
                "ORDER BY bm25(passages), path, number LIMIT ?", (words, k)).fetchall()
        return [Passage(path, int(number), passage, -score) for path, number, passage, score in rows]

    def stale_files(self) -> list[str]:
        """What changed on disk since the build, one `"<path> (changed|added|removed)"` each."""
        with self._lock:
            roots = json.loads(self._meta("roots"))
            rows = self._connection.execute("SELECT source, path, size, mtime_ns FROM files").fetchall()
        built = {source: (path, size, mtime_ns) for source, path, size, mtime_ns in rows}
        now = {str(file.source): file for file in _corpus_files([Path(root) for root in roots], missing_ok=True)}
        stale = [f"{path} (removed)" for source, (path, _, _) in built.items() if source not in now]
        stale += [f"{file.path} (added)" for source, file in now.items() if source not in built]
        stale += [f"{file.path} (changed)" for source, file in now.items()
                  if source in built and built[source][1:] != (file.size, file.mtime_ns)]
        return sorted(stale)

    def close(self) -> None:
        self._connection.close()

    def _meta(self, key: str) -> str:
        row = self._connection.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        assert row is not None, f"the index {self.db_path} has no {key!r}"
        return str(row[0])

    def __reduce__(self) -> tuple[object, tuple[str]]:
        """Pickle as the file to open again, so a tool holding the index can cross process boundaries."""
        if self.db_path == ":memory:":
            raise TypeError("An in-memory SearchIndex cannot be pickled; build it into a file to share it.")
        return SearchIndex.open, (self.db_path,)


class SearchTool:
    """The `search` tool over one index: `SearchTool(index).search`.

    The index is read-only, so one `SearchTool` may serve every episode of a run.
    """

    def __init__(self, index: SearchIndex, max_excerpt_chars: int = MAX_PASSAGE_CHARS) -> None:
        if max_excerpt_chars < 1:
            raise ConfigurationError(f"max_excerpt_chars must be at least 1; got {max_excerpt_chars}.")
        self.index = index
        self.max_excerpt_chars = max_excerpt_chars  # a longer passage is cut, with "…"

    @tool
    def search(
        self,
        query: Annotated[str, "the words to look for, e.g. 'boiling point of water at altitude'"],
        k: Annotated[int, Field(ge=1, le=MAX_K, description="how many passages to return")] = 5,
    ) -> ToolResult:
        """Search the documents for passages holding the query's words; the best matches come first,
        each with its file's path and its passage number."""
        try:
            passages = self.index.query(query, k)
        except QueryError as exc:
            return error_tool_result(str(exc))
        if not passages:
            return simple_tool_result(f"No passage matches {query!r}.", metrics={"hits": 0.0})
        found = [{"path": p.path, "passage": p.number, "text": _excerpt(p.text, self.max_excerpt_chars)}
                 for p in passages]
        text = json.dumps(found, ensure_ascii=False, indent=1)  # ensure_ascii=False: words, not \u escapes
        return simple_tool_result(text, metrics={"hits": float(len(found))})


def fts_query(text: str) -> str:
    """`text` as an FTS5 query that cannot hold operators: its words, each quoted, joined by OR.

    Raises:
        QueryError: `text` holds no words.
    """
    words = list(dict.fromkeys(word.lower() for word in _WORD.findall(unicodedata.normalize("NFC", text))))
    if not words:
        raise QueryError(f"the query {text!r} has no words to search for")
    return " OR ".join(f'"{word}"' for word in words[:MAX_QUERY_WORDS])  # a word never holds a quote


def split_passages(text: str, max_chars: int = MAX_PASSAGE_CHARS) -> list[str]:
    """`text` as passages of at most `max_chars` characters: paragraphs joined while they fit."""
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    passages: list[str] = []
    for piece in (piece for paragraph in paragraphs for piece in _wrapped(paragraph, max_chars)):
        if passages and len(passages[-1]) + 2 + len(piece) <= max_chars:
            passages[-1] += "\n\n" + piece
        else:
            passages.append(piece)
    return passages


def _wrapped(paragraph: str, max_chars: int) -> Iterator[str]:
    """`paragraph` in pieces of at most `max_chars`, cut at the last whitespace that fits (a word
    longer than `max_chars` is cut where it must be)."""
    while len(paragraph) > max_chars:
        space = max(paragraph.rfind(c, 0, max_chars + 1) for c in " \t\n")
        cut = space if space > 0 else max_chars
        yield paragraph[:cut].rstrip()
        paragraph = paragraph[cut:].lstrip()
    if paragraph:
        yield paragraph


def _excerpt(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[: max_chars - 1].rstrip() + "…"


def _corpus_files(roots: list[Path], missing_ok: bool) -> list[_File]:
    """The `.txt`/`.md` files at `roots` (files, or folders searched recursively), each once, sorted
    by path within each root; a missing root is an error unless `missing_ok`."""
    found: dict[Path, _File] = {}
    for root in roots:
        if not root.exists():
            if missing_ok:
                continue
            raise ConfigurationError(f"{root} does not exist; a corpus is made of {' and '.join(SUFFIXES)} files "
                                     "and folders holding them.")
        if root.is_dir():
            files = sorted(f for f in root.rglob("*") if f.suffix.lower() in SUFFIXES and f.is_file())
            named = [(f, f"{root.name}/{f.relative_to(root).as_posix()}") for f in files]
        elif root.suffix.lower() in SUFFIXES:
            named = [(root, root.name)]
        else:
            raise ConfigurationError(f"{root} is not a {' or '.join(SUFFIXES)} file; the index reads only those.")
        for file, path in named:
            stat = file.stat()
            found.setdefault(file, _File(file, path, stat.st_size, stat.st_mtime_ns))
    return list(found.values())


def _write(connection: sqlite3.Connection, roots: list[Path], files: list[_File], max_passage_chars: int) -> None:
    """Fill an empty database with the index of `files` (their stamps taken before reading them)."""
    connection.executescript(_SCHEMA)
    meta = {"format": _FORMAT, "roots": json.dumps([str(r) for r in roots]),
            "max_passage_chars": str(max_passage_chars)}
    connection.executemany("INSERT INTO meta VALUES (?, ?)", meta.items())
    count = 0
    for file in files:
        passages = split_passages(_read_text(file.source), max_passage_chars)
        connection.execute("INSERT INTO files VALUES (?, ?, ?, ?)",
                           (str(file.source), file.path, file.size, file.mtime_ns))
        connection.executemany("INSERT INTO passages (text, path, number) VALUES (?, ?, ?)",
                               ((text, file.path, number) for number, text in enumerate(passages, 1)))
        count += len(passages)
    if not count:
        names = ", ".join(str(r) for r in roots)
        raise DataFormatError(f"The corpus at {names} holds no text: no {' or '.join(SUFFIXES)} file with "
                              "words in it.")
    connection.commit()


def _read_text(path: Path) -> str:
    """The text of `path`, NFC-normalised as queries are, without a byte-order mark."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataFormatError(f"{path} is not UTF-8 text (byte {exc.start} is {exc.object[exc.start]:#04x}); "
                              "convert it to UTF-8 to index it.") from None
    return unicodedata.normalize("NFC", text.removeprefix("\ufeff"))


def _read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection to the index at `path`, shared by threads (`SearchIndex` locks it)."""
    connection = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, check_same_thread=False)
    if _format(connection) != _FORMAT:
        connection.close()
        raise ConfigurationError(f"{path} is not a search index of this version (format {_FORMAT}); build it "
                                 "with SearchIndex.build.")
    return connection


def _format(connection: sqlite3.Connection) -> str | None:
    """The format of the index behind `connection`; None when it is no search index."""
    try:
        row = connection.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
    except sqlite3.DatabaseError:  # not SQLite, or SQLite without our tables
        return None
    return None if row is None else str(row[0])


def _check_replaceable(target: Path) -> None:
    """Refuse to build over a file that is not a search index (a typo must not clobber a database)."""
    if not target.parent.is_dir():
        raise ConfigurationError(f"Cannot write the search index {target}: the folder {target.parent} "
                                 "does not exist.")
    if target.exists():
        with closing(sqlite3.connect(f"{target.resolve().as_uri()}?mode=ro", uri=True)) as connection:
            if _format(connection) is None:
                raise ConfigurationError(f"Refusing to replace {target}: it is not a search index. Remove it "
                                         "or choose another db_path.")
