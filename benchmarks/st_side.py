"""The side environment for sentence-transformers' ONNX and OpenVINO backends, and one call that measures them.

ST's ONNX backend needs optimum-onnx and its OpenVINO backend optimum-intel; both pin transformers < 4.58, which
bertkit's own environment (transformers 5) cannot install. So `bench_embed.py` makes a second virtual environment,
benchmarks/.venv-st (git-ignored, made once, about 1.5 GB), with the CPU torch bertkit uses and those packages, and runs
`st_backends.py` in it as a subprocess on the same machine, in the same benchmark run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
VENV = HERE / ".venv-st"
REQUIREMENTS = [
    "transformers<4.58", "huggingface-hub<1.0", "datasets<4.3", "sentence-transformers",
    "optimum-onnx[onnxruntime]", "optimum-intel[openvino]",
]
"""What ST's documentation installs for `backend="onnx"` and `backend="openvino"`, pinned to what resolves with a
transformers that optimum supports (datasets and huggingface-hub: the versions those accept)."""


def ensure_env(venv: Path = VENV) -> Path:
    """The side environment's python, made on first use (torch: the same CPU build as this one, installed first
    so pip does not pull a CUDA build)."""
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    if stamp.exists():
        return python
    import torch

    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, f"torch=={torch.__version__.split('+')[0]}"], check=True)
    subprocess.run([*pip, f"torch=={torch.__version__.split('+')[0]}", *REQUIREMENTS], check=True)
    stamp.write_text("\n".join(REQUIREMENTS) + "\n", encoding="utf-8")
    return python


def measure_st_backends(model_dir: Path, texts_file: Path, rows: int, calibration: Path, out: Path,
                        repeats: int = 1) -> dict[str, Any]:
    """Run st_backends.py in the side environment; its JSON (or {"error": ...} when the environment cannot be
    made here, e.g. no package index)."""
    try:
        python = ensure_env()
    except (subprocess.CalledProcessError, OSError) as exc:
        return {"error": f"could not make {VENV}: {exc}"}
    cmd = [str(python), str(HERE / "st_backends.py"), "--model", str(model_dir), "--texts", str(texts_file),
           "--rows", str(rows), "--calibration", str(calibration), "--out", str(out), "--repeats", str(repeats)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "BENCH_THREADS": str(_threads())}
    done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        return {"error": f"st_backends.py exited {done.returncode}: {done.stderr[-500:]}"}
    return json.loads(out.read_text(encoding="utf-8"))


def _threads() -> int:
    import torch

    return torch.get_num_threads()
