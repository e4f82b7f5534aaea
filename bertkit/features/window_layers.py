"""Token vectors of question-answering windows (`encoding.qa_windows`), one hidden state at a time: where a span probe
reads its rows from, so that a table of many rows holds one row's matrix in memory, not every hidden state of every
token.

`write_window_layers` runs the frozen encoder once over the windows (`torch.inference_mode()`, batches sorted by
length, each padded to its longest window) and writes every real token's vector of each hidden state asked for into
unlinked temporary files (`features.word_layers.LayerFiles`, float32: one file per state, a killed process leaves
nothing behind), batch after batch: memory holds one batch's states. The files hold the windows in the order the
batches read them (`WindowLayers.order`), each window's tokens in order; `LayerFiles` then builds a row (a state, or
a sum or concat of states) as it does for words, bit for bit."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertkit.encoding.batches import pad_batch
from bertkit.encoding.qa_windows import QAWindows, inference_batches
from bertkit.features.word_layers import DTYPE, LayerFiles, scratch_folder
from bertkit.features.words import compute_context
from bertkit.io import disk
from bertkit.models.inputs import accepted_inputs


@dataclass
class WindowLayers:
    """Hidden states of windows' tokens (`layers`: row r of a state is a token; window i of the files is
    `layers.sentence_offsets[i]:layers.sentence_offsets[i + 1]`), the files' window i being window `order[i]` of the
    `QAWindows` read. Close it (`close`, or `with`) to give the disk space back."""

    layers: LayerFiles
    order: np.ndarray

    @property
    def window_offsets(self) -> np.ndarray:
        return self.layers.sentence_offsets

    @property
    def n_tokens(self) -> int:
        return self.layers.n_words

    def close(self) -> None:
        self.layers.close()

    def __enter__(self) -> WindowLayers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_window_layers(encoder: Any, windows: QAWindows, states: Sequence[int], pad_id: int,
                        cache_dir: str | None = None, batch_size: int = 32, dtype: Any = None,
                        bar: Any = None) -> WindowLayers:
    """The hidden states `states` (0: the embeddings) of every real token of `windows`, from one forward pass per batch
    (in `dtype`: the run's precision), into unlinked files in the cache's scratch folder (`scratch_folder`: the disk
    needs tokens x states x width x 4 bytes, checked before the first write). `bar`: told each batch's windows."""
    import torch

    batches = inference_batches(windows, batch_size)
    order = np.concatenate(batches).astype(np.int64) if batches else np.empty(0, dtype=np.int64)
    offsets = np.concatenate([np.zeros(1, np.int64), np.cumsum(windows.lengths[order], dtype=np.int64)])
    width = int(encoder.config.hidden_size)
    folder = scratch_folder(cache_dir)
    layers = LayerFiles(int(encoder.config.num_hidden_layers), tuple(states), offsets, width)
    accepted, device = accepted_inputs(encoder), next(encoder.parameters()).device
    with contextlib.ExitStack() as undo, disk.writing(folder, disk.with_margin(int(offsets[-1]) * len(states) * width
                                                                               * DTYPE.itemsize)):
        undo.callback(layers.close)  # an error on the way gives the disk back
        layers.files = {i: tempfile.TemporaryFile(dir=folder, prefix="bertkit-token-layer-") for i in states}
        with torch.inference_mode(), compute_context(encoder, dtype):
            for rows in batches:
                batch = pad_batch(windows.encoded, rows, pad_id, inputs=accepted, device=device)
                hidden = encoder(**batch, output_hidden_states=True, return_dict=True).hidden_states
                real = torch.arange(batch["input_ids"].shape[1])[None, :] < torch.from_numpy(
                    windows.lengths[rows].astype(np.int64))[:, None]  # windows are padded on the right
                for state in states:
                    vectors = hidden[state][real.to(device)].float().cpu().numpy()
                    layers.files[state].write(memoryview(np.ascontiguousarray(vectors, dtype=DTYPE)).cast("B"))
                if bar is not None:
                    bar.update(len(rows))
        for handle in layers.files.values():
            handle.flush()
        undo.pop_all()
    return WindowLayers(layers, order)
