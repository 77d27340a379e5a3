"""`predict_performance`: the Python API's one-case prediction (the CLI's ``hwsel predict``).

The question is built by `hwsel.query.ask` and answered by a `hwsel.predict.Predictor`; the many-
case view is `hwsel.matrix.prediction_matrix`, selection is `hwsel.select`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from .config import SelectionConfig
from .predict import Predictor, predictor_for
from .query import ModelRef, Prediction


def predict_performance(model: ModelRef, hardware: str | Sequence[str] | None = None, batch_size: int = 1,
                        precision: str = "fp32", mode: str = "inference", backend: str | None = None, *,
                        device: str | Mapping[str, str] | None = None,
                        predictor: Predictor | None = None, source: str | os.PathLike[str] | None = None,
                        tracking_uri: str | None = None,
                        config: SelectionConfig | str | os.PathLike[str] | None = None,
                        seq_length: int | None = None) -> dict[str, Prediction]:
    """hardware -> `Prediction` (latency_ms, throughput, memory_mb, source, interval) for one case.

    `hardware` defaults to every configured target: prediction is for hardware you may not have.
    `device` names the device (``"NVIDIA H100 80GB HBM3"`` or a spec name such as ``"h100"``) for
    one target, or maps targets to devices; otherwise each target gets `Predictor.default_device`.
    `backend` defaults to eager ``torch`` (`hwsel.query.default_backend`). Each `Prediction` says
    which device and backend it is for. `seq_length` asks about another input length in tokens
    (default: the model's own, e.g. 128 for the zoo's text models; at most its position limit):
    FLOPs scale with it and the answer's model is named ``<name>@seq<N>``, so measurements at
    the default length never answer for it (the CLI's ``--seq-length``, REST's
    ``sequence_length``). Bad input raises `hwsel.query.QuestionError` (a ValueError;
    `UnknownModelError`, also a KeyError, for an unknown model) naming the field.
    """
    p = predictor_for(predictor, source, tracking_uri, config)
    return p.predict(model, hardware, batch_size=batch_size, precision=precision, mode=mode, backend=backend,
                     device=device, sequence_length=seq_length)


__all__ = ["predict_performance"]
