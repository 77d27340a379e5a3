"""The ``train`` scenario: one optimizer step (forward, loss, backward, AdamW step) per iteration.

Mixed precision is automatic mixed precision: fp32 master weights, the forward and the loss under
``torch.autocast`` at fp16 (with a ``GradScaler``) or bf16, the record's precision.
"""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..backends._torch import EAGER, TorchModel, effective_precision, torch_fields
from ..errors import PrecisionMismatch, UnsupportedCase
from ..torch_device import device_string, disable_tf32
from ..vocabulary import MODE_DOCS, TORCH_DTYPES, TRAIN_MODE
from . import Scenario, register_scenario

if TYPE_CHECKING:
    from ..backends.base import LoadedModel
    from ..hardware import HardwareInfo
    from ..models import ModelSpec

#: precision -> autocast dtype name; fp32 runs without autocast.
AMP_DTYPES: dict[str, str] = {p: name for p, name in TORCH_DTYPES.items() if p != "fp32"}
#: AdamW learning rate: small, as in fine-tuning; the step's cost does not depend on it.
LEARNING_RATE = 1e-4
#: Bytes per parameter that training keeps beyond the activations: fp32 weights, fp32 gradients
#: and AdamW's two fp32 moments (exp_avg, exp_avg_sq).
TRAIN_BYTES_PER_PARAM = 16
#: Extra bytes per parameter under autocast: the fp16/bf16 copies of the weights autocast caches
#: for the forward.
AMP_CAST_BYTES_PER_PARAM = 2
#: Auto classes whose model is trained on its own tokens (``labels = input_ids``).
CAUSAL_LM_CLASSES = frozenset({"AutoModelForCausalLM", "AutoModelForImageTextToText", "AutoModelForVision2Seq"})
#: Auto classes whose model is trained on its decoder tokens (``labels = decoder_input_ids``).
SEQ2SEQ_LM_CLASSES = frozenset({"AutoModelForSeq2SeqLM", "AutoModelForSpeechSeq2Seq"})


def loss_kind(spec: ModelSpec, model: Any) -> str:
    """How a training step of `model` gets its loss, by what the zoo's head offers:

    - ``contrastive``: the model's own contrastive loss (its forward takes ``return_loss``: CLIP,
      CLAP, X-CLIP), which needs no labels;
    - ``causal_lm``: causal LMs and image-text-to-text models on their own tokens,
      ``labels = input_ids`` (image placeholder tokens ignored);
    - ``seq2seq_lm``: encoder-decoder LMs (T5), ``labels = decoder_input_ids``;
    - ``synthetic``: every other model, `synthetic_loss` (DETR's own loss needs boxes).
    """
    params = inspect.signature(model.forward).parameters
    if "return_loss" in params:
        return "contrastive"
    if "labels" in params and spec.auto_class in CAUSAL_LM_CLASSES:
        return "causal_lm"
    if "labels" in params and spec.auto_class in SEQ2SEQ_LM_CLASSES and spec.modality == "text2text":
        return "seq2seq_lm"
    return "synthetic"


def _loss_inputs(kind: str, model: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    """Forward kwargs that make the model compute its own loss (none for ``synthetic``)."""
    extra: dict[str, Any] = {}
    if "use_cache" in inspect.signature(model.forward).parameters:
        extra["use_cache"] = False  # a KV cache is for decoding; training would only store it
    if kind == "contrastive":
        extra["return_loss"] = True
    elif kind == "causal_lm":
        labels = inputs["input_ids"].clone()
        image_token = getattr(model.config, "image_token_id", None)
        if image_token is None:
            image_token = getattr(model.config, "image_token_index", None)
        if image_token is not None:
            labels[labels == image_token] = -100  # placeholders carry no next-token target
        extra["labels"] = labels
    elif kind == "seq2seq_lm":
        extra["labels"] = inputs["decoder_input_ids"].clone()
    return extra


def synthetic_loss(outputs: Any) -> Any:
    """The sum of the means of the top-level floating tensors of `outputs` that carry a gradient
    (every one, so the backward reaches every head); `UnsupportedCase` when there is none."""
    import torch

    values = outputs.values() if hasattr(outputs, "values") else outputs
    if isinstance(values, torch.Tensor):
        values = (values,)
    terms = [v.float().mean() for v in values
             if isinstance(v, torch.Tensor) and v.is_floating_point() and v.requires_grad]
    if not terms:
        raise UnsupportedCase(f"train: {type(outputs).__name__} has no floating output with a gradient to "
                              "build a loss from")
    return torch.stack(terms).sum()


@dataclass
class _Trainer:
    """A loaded training case: the model (fp32 master weights), AdamW, the GradScaler (fp16, else None)."""

    model: Any
    optimizer: Any
    scaler: Any
    device_type: str
    amp_dtype: Any
    loss_kind: str

    def close(self) -> None:
        """Drop the model, the optimizer's state and the scaler (the runner then collects)."""
        if self.optimizer is not None:
            self.optimizer.state.clear()
            self.optimizer.zero_grad(set_to_none=True)
        self.model = self.optimizer = self.scaler = None


class TrainStep:
    """One training step on fixed inputs, the call the runner times; `trainer` is its loaded
    case's, shared by the case's steps."""

    def __init__(self, trainer: _Trainer, inputs: dict[str, Any]) -> None:
        self.trainer = trainer
        self.inputs = inputs
        self._loss_inputs = _loss_inputs(trainer.loss_kind, trainer.model, inputs)

    def __call__(self) -> Any:
        """zero_grad, forward and loss under autocast, backward (scaled at fp16), optimizer step;
        returns the loss detached, without ``.item()``, which would sync a GPU every step."""
        import torch

        t = self.trainer
        if t.model is None:
            raise RuntimeError("train: this case's model was closed; prepare the inputs of a fresh load")
        t.optimizer.zero_grad(set_to_none=True)
        with torch.autocast(t.device_type, dtype=t.amp_dtype) if t.amp_dtype else contextlib.nullcontext():
            outputs = t.model(**self.inputs, **self._loss_inputs)
            loss = outputs.loss if t.loss_kind != "synthetic" else synthetic_loss(outputs)
        del outputs
        if loss is None:
            raise UnsupportedCase(f"train: {type(t.model).__name__} returned no {t.loss_kind} loss")
        if t.scaler is not None:
            t.scaler.scale(loss).backward()
            t.scaler.step(t.optimizer)
            t.scaler.update()
        else:
            loss.backward()
            t.optimizer.step()
        return loss.detach()


def _make_optimizer(model: Any, device_type: str) -> tuple[Any, str]:
    """AdamW with the fastest kernel the device offers: fused, else foreach, else the loop."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    try:
        return torch.optim.AdamW(params, lr=LEARNING_RATE, fused=True), "fused"
    except RuntimeError:  # fused=True names the devices it lacks kernels for
        pass
    if device_type in ("cuda", "xpu"):
        return torch.optim.AdamW(params, lr=LEARNING_RATE, foreach=True), "foreach"
    return torch.optim.AdamW(params, lr=LEARNING_RATE, foreach=False), "for-loop"


def _precision_reason(precision: str) -> str:
    return (f"{precision}: training runs fp32, or autocast fp16/bf16 over fp32 master weights; "
            f"{precision} is inference-only quantization")


class TrainScenario(Scenario):
    """One optimizer step per iteration on torch eager, fp32 or autocast fp16/bf16."""

    mode = TRAIN_MODE
    description = MODE_DOCS["train"]
    #: FLOPs of one timed iteration, in forward passes (a backward costs about two forwards).
    forwards_per_iteration = 3.0
    backends = (EAGER,)
    precisions = ("fp32", "fp16", "bf16")

    def supports(self, spec: ModelSpec) -> bool:
        """Every zoo model (one without a floating output skips at its first step)."""
        return True

    def unavailable(self, spec: ModelSpec, backend: str, hardware: str, precision: str,
                    hw: HardwareInfo) -> str | None:
        """Why this training case cannot run here beyond the torch backend's reasons (None when it
        can): its precision, autocast on the device, and beyond the quick tier the training memory
        (`TRAIN_BYTES_PER_PARAM`)."""
        if precision not in self.precisions:
            return _precision_reason(precision)
        if precision != "fp32":
            import torch

            device_type = torch.device(device_string(hardware)).type
            if not torch.amp.is_autocast_available(device_type):
                return f"{precision}: torch {torch.__version__} has no autocast for {device_type}"
        from ..device_memory import MEMORY_USABLE_SHARE, device_memory_mb

        if spec.tier == "quick":  # tiny by contract, and not built at collection
            return None
        try:
            params = spec.architecture.param_count
        except Exception:  # an unbuildable model fails in its run, with the error
            return None
        per_param = TRAIN_BYTES_PER_PARAM + (AMP_CAST_BYTES_PER_PARAM if precision in AMP_DTYPES else 0)
        need = params * per_param / 2**20
        device = device_memory_mb(hardware, hw)
        if device is None or need <= device * MEMORY_USABLE_SHARE:
            return None
        return (f"train needs ~{need / 1024:.1f} GiB for {spec.name} before activations ({per_param} bytes per "
                f"parameter: fp32 weights, gradients, AdamW moments{', autocast copies' if per_param > 16 else ''}), "
                f"{hardware} has {device / 1024:.1f} GiB ({MEMORY_USABLE_SHARE:.0%} usable)")

    def load(self, spec: ModelSpec, hardware: str, precision: str, device_index: int = 0, *,
             backend: str = EAGER, **options: Any) -> LoadedModel:
        """Build the seeded model in fp32 in train mode on the device, with AdamW (and a grad
        scaler at fp16); ``prepare(inputs)`` returns a `TrainStep`."""
        import torch

        if precision not in self.precisions:
            raise UnsupportedCase(_precision_reason(precision))
        device = device_string(hardware, device_index)
        device_type = torch.device(device).type
        disable_tf32(hardware)
        model = spec.build_model("cpu").to(device).train()
        master = effective_precision(model)
        if master != "fp32":
            raise PrecisionMismatch(f"{spec.name}: training keeps fp32 master weights, the model holds {master}")
        amp_dtype = getattr(torch, AMP_DTYPES[precision]) if precision in AMP_DTYPES else None
        # fp16 gradients underflow without loss scaling; bf16 has fp32's exponent range.
        scaler = torch.amp.GradScaler(device_type) if precision == "fp16" else None
        optimizer, impl = _make_optimizer(model, device_type)
        kind = loss_kind(spec, model)
        details = {
            "amp": amp_dtype is not None,
            "amp_dtype": AMP_DTYPES.get(precision),
            "master_weights": "fp32",
            "grad_scaler": scaler is not None,
            "optimizer": "AdamW",
            "optimizer_impl": impl,
            "learning_rate": LEARNING_RATE,
            "loss": kind,
        }
        trainer = _Trainer(model, optimizer, scaler, device_type, amp_dtype, kind)
        return TrainModel(**torch_fields(hardware, device_index, precision, details), trainer=trainer)


@dataclass(frozen=True, kw_only=True)
class TrainModel(TorchModel):
    """A model loaded for training: each `prepare` gives a `TrainStep` on the inputs."""

    trainer: _Trainer

    def prepare(self, inputs: dict[str, Any]) -> TrainStep:
        # Inputs stay fp32 (autocast casts inside the ops that run at low precision).
        device = device_string(self.device_kind, self.device_index)
        return TrainStep(self.trainer, {k: v.to(device) for k, v in inputs.items()})

    def close(self) -> None:
        self.trainer.close()


SCENARIO = register_scenario(TrainScenario())

__all__ = ["AMP_DTYPES", "SCENARIO", "TrainModel", "TrainScenario", "TrainStep", "loss_kind", "synthetic_loss"]
