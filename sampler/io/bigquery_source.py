"""A node or edge set in BigQuery: the schema's `metadata.bigquery`, as a source name.

A Unigraph set's `metadata` names either table files (`filename`) or a BigQuery source
(`bigquery`): a table (`table_spec { project dataset table }`, the project optional) or a
GoogleSQL query (`sql`). `source_name` turns that message into one string, which the rest of
the project carries where a set's file pattern goes (`NodeSetInfo.filename`): two sets that
name the same table get the same string, as two sets that name the same files do.
`graph_tables.table_files` sees the prefix and reads the set through
`sampler.io.bigquery_reader` instead of files.

The columns follow TF-GNN's BigQuery reader (tensorflow_gnn/data/unigraph.py): a node set's
id is the column `id`, an edge set's ends `source` and `target` (BigQuery column names have no
`#`), every feature the column of its name. A query's result has the same columns.

`read_method`: DIRECT_READ (the BigQuery Storage Read API, into Arrow record batches) is what
this project reads with, and what an unset `read_method` means here. EXPORT (an extract job to
Cloud Storage, then the files) is refused with one line that says to use DIRECT_READ.

No Google client is imported here: this is the schema's side (no network).
"""

from __future__ import annotations

import dataclasses
import json
import re

from sampler.errors import UserError

PREFIX = "bigquery:"  # of a source name (NodeSetInfo.filename of a set in BigQuery)
UNIT_FORMAT = "bigquery"  # the format of a stream unit (graph_tables.table_files)

# The table's column for each id column of the canonical tables (CONVENTIONS.md).
ID_COLUMNS = {"#id": "id", "#source": "source", "#target": "target"}

_EXPORT, _DIRECT_READ = 1, 2  # BigQuery.ReadMethod values (graph_schema.proto)


@dataclasses.dataclass(frozen=True)
class BigQuerySource:
    """A table (`dataset`, `table`, `project` or "" for the default project) or a query."""

    project: str = ""
    dataset: str = ""
    table: str = ""
    sql: str = ""

    @property
    def is_query(self) -> bool:
        return bool(self.sql)

    def table_id(self, default_project: str = "") -> str:
        """`project.dataset.table` (BigQuery's own spelling of a table id)."""
        project = self.project or default_project
        return ".".join(p for p in (project, self.dataset, self.table) if p)

    def describe(self) -> str:
        """'BigQuery table p.d.t' or 'BigQuery query `SELECT ...`', for messages."""
        if not self.is_query:
            return f"BigQuery table {self.table_id()}"
        text = " ".join(self.sql.split())
        return f"BigQuery query `{text[:60]}{'...' if len(text) > 60 else ''}`"


def is_source(name: str | None) -> bool:
    """Whether a set's `filename` is a BigQuery source name rather than a file pattern."""
    return bool(name) and name.startswith(PREFIX)


def source_name(source: BigQuerySource) -> str:
    """The one string of a source (its fields as sorted JSON after PREFIX)."""
    fields = {k: v for k, v in dataclasses.asdict(source).items() if v}
    return PREFIX + json.dumps(fields, sort_keys=True, separators=(",", ":"))


def parse(name: str) -> BigQuerySource:
    """The source of a `source_name` string."""
    if not is_source(name):
        raise ValueError(f"not a BigQuery source name: {name!r}")
    return BigQuerySource(**json.loads(name[len(PREFIX) :]))


def describe(name: str) -> str:
    return parse(name).describe()


# What a statement's text holds besides code, where a ';' ends nothing: quoted text (strings,
# triple-quoted too, and `identifiers`) and comments (--, # to the end of the line; /* */).
_SKIPPED = re.compile(
    "|".join(
        [
            r"'''.*?'''",
            r'""".*?"""',
            r"'(?:\\.|[^'\\\n])*'",
            r'"(?:\\.|[^"\\\n])*"',
            r"`(?:\\.|[^`\\])*`",
            r"--[^\n]*",
            r"#[^\n]*",
            r"/\*.*?\*/",
        ]
    ),
    re.DOTALL,
)


def one_statement(sql: str, where: str) -> str:
    """`sql` without its final ';' (and what follows it: blanks and comments); UserError when
    another statement follows (a script), found here, before anything is sent to BigQuery."""
    code = _SKIPPED.sub(lambda m: " " * len(m.group(0)), sql)
    end = code.find(";")
    if end < 0:
        return sql
    rest = code[end + 1 :]
    if rest.strip():
        after = " ".join(sql[end + 1 :].split())[:40]
        raise UserError(
            f"{where}: metadata.bigquery.sql is more than one statement (`{after}` after a "
            "';'); it must be one query (SELECT)"
        )
    return sql[:end].rstrip()


def _checked_id(value: str, what: str, where: str) -> str:
    value = value.strip()
    if not value:
        raise UserError(f"{where}: metadata.bigquery.table_spec has no {what}")
    if any(c in value for c in "`/ \t\n"):
        raise UserError(f"{where}: metadata.bigquery.table_spec.{what} '{value}' is not a {what}")
    return value


def from_metadata(bigquery, where: str, features, id_columns: tuple[str, ...]) -> str:
    """The source name of a schema's `metadata.bigquery` message (ours or TF-GNN's); UserError
    (naming `where`, e.g. "schema.pbtxt: node set 'paper'") for what cannot be read.
    `id_columns`: the set's canonical id columns ('#id', or '#source' and '#target')."""
    if bigquery.HasField("read_method") and bigquery.read_method == _EXPORT:
        raise UserError(
            f"{where}: metadata.bigquery.read_method EXPORT (an extract job to Cloud Storage) "
            "is not supported; use read_method: DIRECT_READ (the BigQuery Storage Read API)"
        )
    if bigquery.HasField("read_method") and bigquery.read_method != _DIRECT_READ:
        raise UserError(f"{where}: metadata.bigquery.read_method must be DIRECT_READ (or left out)")
    taken = sorted(set(features) & {ID_COLUMNS[c] for c in id_columns})
    if taken:
        raise UserError(
            f"{where}: feature '{taken[0]}' has the name of the set's id column in BigQuery; "
            "rename the feature (and its column)"
        )
    which = bigquery.WhichOneof("source")
    if which == "sql":
        sql = bigquery.sql.strip()
        if not sql:
            raise UserError(f"{where}: metadata.bigquery.sql is empty")
        if sql.lower().startswith("#legacysql"):
            raise UserError(
                f"{where}: metadata.bigquery.sql is legacy SQL; write it in GoogleSQL "
                "(standard SQL)"
            )
        return source_name(BigQuerySource(sql=one_statement(sql, where)))
    if which != "table_spec":
        raise UserError(f"{where}: metadata.bigquery names neither a table_spec nor sql")
    spec = bigquery.table_spec
    project = spec.project.strip()
    if project:
        project = _checked_id(project, "project", where)
    return source_name(
        BigQuerySource(
            project=project,
            dataset=_checked_id(spec.dataset, "dataset", where),
            table=_checked_id(spec.table, "table", where),
        )
    )
