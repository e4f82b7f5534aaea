"""A tagged corpus read as rows of text, for the commands that read sentences rather than words (`bertkit tokens`,
and a sentence classifier's `predict`): each sentence's words joined by single spaces, the line (or row) it starts
on kept for messages. Its tags are not read; where a command needs one label per text the corpus is refused with the
flag that reads it as tagged data."""

from __future__ import annotations

from pathlib import Path

from bertkit.data.dataset import TextDataset
from bertkit.data.options import DataOptions
from bertkit.data.tagged import DataSource, TaggedColumns, open_tagged, raw_sentences
from bertkit.errors import UserError
from bertkit.io.digests import file_digest


def tagged_text_dataset(path: Path, opts: DataOptions, need_labels: bool) -> TextDataset:
    """The sentences of the tagged file `path` (the first --limit) as a `TextDataset` of their words joined by single
    spaces, read with the data group's --text-column, --label-column and --encoding; refused when labels are
    needed."""
    if need_labels:
        raise UserError(f"{path} is a tagged corpus (one tag per word), but this reads one label per text. Pass "
                        f"--task tags (where the command has it) to read its tags, or a table of texts and labels.")
    source = DataSource(str(path))
    columns, _ = open_tagged(source, TaggedColumns(opts.text_column, opts.label_column, encoding=opts.encoding))
    texts: list[str] = []
    lines: list[int] = []
    for raw in raw_sentences(source, columns):
        if opts.limit is not None and len(texts) == opts.limit:
            break
        texts.append(" ".join(raw.words))
        lines.append(raw.line)
    if not texts:
        raise UserError(f"{path} holds no tagged sentence. Valid: one word and its tag per line, a blank line between "
                        f"sentences. Check the file and --text-column/--label-column.")
    return TextDataset(texts, source=str(path), fingerprint=f"sha256:{file_digest(path)[1]}", line_numbers=lines)
