"""Which table files a graph's build reads: each file once, however many sets read it alike.

A file that several edge sets read alike (a set and its reversed view: the same file, features
and latent ends) is read once; the other sets' batches are its batches with the ends swapped.
`--runner InMemory` (sampler.sample.in_memory.read_tables) and the `worker` placement's
snapshot (sampler.beam.sample.snapshot) read through this plan, so both read a shared file once
and count its rows and bad rows once for every set that reads it, as if each had read it.
"""

from __future__ import annotations

import dataclasses

from sampler.batches import EdgeBatch
from sampler.io import graph_tables
from sampler.schema import GraphInfo

File = tuple[str, str, str, str]  # (kind, set, path, format): graph_tables.graph_files


@dataclasses.dataclass(frozen=True)
class FileReads:
    """`files` (every set's files, graph_files' order), the `reads` among them (the first set's
    tuple of each distinct file), and for each file the read it takes and whether its edges
    are that read's with the ends swapped."""

    files: list[File]
    reads: list[File]
    source_of: list[tuple[int, bool]]

    def readers(self, read: int) -> list[str]:
        """The sets whose files are read `read`, in graph_files' order."""
        return [f[1] for f, (i, _) in zip(self.files, self.source_of, strict=True) if i == read]

    def per_file(self, pieces: list[list]) -> list[tuple[str, str, list]]:
        """[(kind, set, pieces)] of every file, from the pieces of each read (edge pieces:
        (EdgeBatch, {end column: ids})): a file that another set's read covers gets that
        read's pieces, their ends swapped where its set is the other's reverse."""
        out = []
        for (kind, name, _, _), (index, swap) in zip(self.files, self.source_of, strict=True):
            got = pieces[index]
            if swap:
                got = [(EdgeBatch(b.dst, b.src, b.features), ends) for b, ends in got]
            out.append((kind, name, got))
        return out


def file_reads(graph: GraphInfo) -> FileReads:
    """The reads of `graph`'s table files (see the module docstring)."""
    files = graph_tables.graph_files(graph)
    first_reader: dict[tuple, int] = {}
    reads: list[File] = []
    source_of: list[tuple[int, bool]] = []
    for kind, name, path, fmt in files:
        key: tuple = (kind, name, path, fmt)
        if kind == "edge":
            info = graph.edge_sets[name]
            ends = graph_tables.latent_ends(graph, info)
            key = (
                kind,
                path,
                fmt,
                tuple(sorted(info.features.items())),
                tuple(sorted(ends.items())),
            )
        if key in first_reader:
            read = first_reader[key]
            swap = graph.edge_sets[name].reversed != graph.edge_sets[reads[read][1]].reversed
            source_of.append((read, swap))
            continue
        first_reader[key] = len(reads)
        source_of.append((len(reads), False))
        reads.append((kind, name, path, fmt))
    return FileReads(files, reads, source_of)
