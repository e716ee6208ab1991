"""Training engine: from scratch or fine-tuning, single process or DistributedDataParallel.

:func:`train` is a generator. It yields an :class:`IterationEvent` after every optimiser
step (loss, learning rate) and an :class:`EpochEvent` after every epoch (mean loss,
per-label validation Dice, ETA), plus :class:`MessageEvent` for things the user must be
told (a replaced output head, a resampled label map, a resumed run). The CLI prints
them, the GUI draws its curves from them; :func:`run_training` drains the generator.

What it does, following nnU-Net v2's trainer where nothing else is said:

- cases are resampled once to the plan's spacing and normalised (CT: clip to the stored
  percentiles, z-score), kept in memory;
- every sample is a patch centred on a random voxel, except that the last third of each
  batch (``oversample_foreground``) is centred on a voxel of a randomly chosen label
  present in the case; augmentation (``medseg.model.augment``) on the fly;
- loss Dice + CE with deep supervision; SGD (nesterov, momentum 0.99, lr 1e-2, weight
  decay 3e-5) or AdamW; poly learning rate ``lr0 * (1 - step/steps) ** 0.9`` (updated
  every step rather than every epoch); gradient norm clipped at 12; AMP on CUDA;
- after each epoch: sliding-window inference on the held-out cases (at the plan's
  spacing) and per-label Dice; an atomic ``checkpoint_last`` (and ``checkpoint_best``
  when the mean Dice improves). A cancel or crash leaves the last completed epoch's
  checkpoint intact and ``resume=True`` continues from it.

Reproducible and distributed: every sample is drawn from a generator seeded with
(seed, epoch, iteration, index in the global batch), and under ``torchrun`` each process
takes a contiguous share of the global batch. Because the loss is a mean of per-sample
terms (per-sample Dice, instance norm), DDP's gradient average equals the single-process
gradient of the same global batch. Only rank 0 writes files.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
import torch
import torch.distributed as dist
from safetensors.torch import load_file, save_file

from medseg.build_info import require_training
from medseg.errors import Cancelled, DatasetError, DeviceError, ModelError
from medseg.io.atomic import atomic_path, atomic_write_text
from medseg.io.volume import Volume
from medseg.model.augment import AugmentConfig, augmented_patch
from medseg.model.datasets import Case, Dataset, Fingerprint, fingerprint_cases
from medseg.model.evaluate import dice_per_label
from medseg.model.losses import DeepSupervisionLoss, DiceCELoss
from medseg.model.plan import Plan
from medseg.model.unet import UNet, build_network
from medseg.progress import CancelToken, ProgressCallback, report

CHECKPOINT_LAST = "checkpoint_last.safetensors"
CHECKPOINT_BEST = "checkpoint_best.safetensors"
HISTORY_FILE = "history.json"
CLASS_LOCATIONS_PER_LABEL = 10_000  # nnU-Net samples at most this many voxels per class and case
POLY_EXPONENT = 0.9
CANONICAL_ORIENTATION = "LPS"  # every medseg-trained plan (see medseg.io.orientation)


# --------------------------------------------------------------------------------------------
# Configuration and events


@dataclass
class TrainConfig:
    epochs: int = 50
    iterations_per_epoch: int = 250
    batch_size: int | None = None  # global batch (split over processes); None = the plan's
    optimizer: str = "sgd"  # "sgd" (nesterov) or "adamw"
    learning_rate: float | None = None  # None: 1e-2 for SGD, 1e-3 for AdamW
    weight_decay: float = 3e-5
    momentum: float = 0.99
    grad_clip: float = 12.0
    oversample_foreground: float = 0.33
    seed: int = 12345
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    amp: bool = True  # only takes effect on CUDA
    deep_supervision: bool = True
    validation_step: float = 0.5  # sliding-window step (fraction of the patch)
    validate_every: int = 1  # epochs between validations (the last epoch is always validated)
    augmentation: AugmentConfig = field(default_factory=AugmentConfig)

    def resolved_learning_rate(self) -> float:
        if self.learning_rate is not None:
            return float(self.learning_rate)
        return 1e-2 if self.optimizer == "sgd" else 1e-3

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["learning_rate"] = self.resolved_learning_rate()
        return data


@dataclass(frozen=True)
class IterationEvent:
    epoch: int  # 0-based
    iteration: int  # 0-based, within the epoch
    step: int  # global optimiser step
    total_steps: int
    loss: float
    learning_rate: float


@dataclass(frozen=True)
class EpochEvent:
    epoch: int  # 0-based, the epoch just finished
    epochs: int
    train_loss: float
    validation_dice: dict[str, float]  # label name -> Dice (mean over held-out cases)
    mean_dice: float  # NaN without validation cases
    best_mean_dice: float
    is_best: bool
    seconds: float
    eta_seconds: float
    patches_per_second: float


@dataclass(frozen=True)
class MessageEvent:
    text: str


TrainEvent = IterationEvent | EpochEvent | MessageEvent


@dataclass
class TrainResult:
    package_path: Path | None  # the exported model package (rank 0), None on other ranks
    history: list[dict[str, Any]]
    best_epoch: int | None
    best_mean_dice: float
    messages: list[str]


# --------------------------------------------------------------------------------------------
# Distributed setup


@dataclass(frozen=True)
class DistributedContext:
    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")
    initialized_here: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise DeviceError("CUDA was requested but no CUDA GPU is available", hint="use --device cpu")
        return torch.device(device)
    if device == "cpu":
        return torch.device("cpu")
    raise DeviceError(f"training runs on cpu or cuda, not '{device}'")


def setup_distributed(device: str) -> DistributedContext:
    """Join the process group torchrun describes (WORLD_SIZE > 1); otherwise a single process.

    NCCL on CUDA, gloo on CPU; under CUDA each process uses the GPU of its LOCAL_RANK.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    base = resolve_device(device)
    if world_size <= 1:
        return DistributedContext(device=base)
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if base.type == "cuda":
        base = torch.device("cuda", local_rank)
        torch.cuda.set_device(base)
    initialized_here = False
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if base.type == "cuda" else "gloo", init_method="env://")
        initialized_here = True
    return DistributedContext(rank, world_size, base, initialized_here)


# --------------------------------------------------------------------------------------------
# Planning and preprocessing


def plan_for_dataset(
    fingerprint: Fingerprint,
    num_classes: int,
    *,
    configuration: str = "3d_fullres",
    target_spacing_zyx: Sequence[float] | None = None,
    memory_reference: float | None = None,
    max_features: int | None = None,
    base_features: int | None = None,
    num_stages: int | None = None,
) -> Plan:
    """The plan for a dataset: nnU-Net's planner on the fingerprint, with CT normalisation.

    ``target_spacing_zyx`` plans at a chosen (e.g. coarser) spacing instead of the median;
    ``memory_reference`` shrinks the patch (nnU-Net's 560e6 fits 8 GB of GPU);
    ``base_features`` (nnU-Net: 32) sets the first stage's channels, doubling per stage,
    ``max_features`` caps them, and ``num_stages`` drops the deepest stages: all three keep
    a CPU-trainable model small.
    """
    from medseg.model.plan import REFERENCE_VAL_3D, plan_from_fingerprint, plan_from_spacing

    normalization = {"scheme": "CTNormalization", **{k: fingerprint.foreground_intensity[k] for k in
                                                     ("mean", "std", "percentile_00_5", "percentile_99_5")}}
    reference = memory_reference or REFERENCE_VAL_3D
    if target_spacing_zyx is None:
        plans = plan_from_fingerprint(fingerprint.spacings_zyx, fingerprint.shapes_zyx, reference,
                                      num_classes=num_classes, normalization=normalization, suppress_transpose=True)
        if configuration not in plans:
            raise ModelError(f"the planner made no '{configuration}' configuration for this dataset "
                             f"(made: {sorted(plans)})")
        plan = plans[configuration]
    else:
        target = [float(s) for s in target_spacing_zyx]
        shapes = [[round(sp / t * sh) for sp, t, sh in zip(spacing, target, shape)]
                  for spacing, shape in zip(fingerprint.spacings_zyx, fingerprint.shapes_zyx)]
        median = [int(v) for v in np.median(np.asarray(shapes, dtype=float), axis=0)]
        dim = 2 if configuration == "2d" else 3
        plan = plan_from_spacing(target, median, reference, dim, num_classes=num_classes,
                                 num_training_cases=len(shapes), normalization=normalization,
                                 target_spacing_zyx=target, name=configuration)
    # medseg-trained networks see every image in one orientation (medseg.io.orientation).
    plan = dataclasses.replace(plan, orientation=CANONICAL_ORIENTATION)
    if num_stages is not None and num_stages < plan.num_stages:
        plan = _truncate_stages(plan, num_stages)
    if base_features is not None or max_features is not None:
        base = base_features or plan.features_per_stage[0]
        features = [base * 2**i for i in range(plan.num_stages)]
        cap = max_features or max(plan.features_per_stage)
        plan = dataclasses.replace(plan, features_per_stage=[min(f, cap) for f in features])
    return plan


def _truncate_stages(plan: Plan, num_stages: int) -> Plan:
    divisor = [1] * plan.dim
    for stride in plan.strides[:num_stages]:
        divisor = [d * s for d, s in zip(divisor, stride)]
    patch = [max(d, (p // d) * d) for p, d in zip(plan.patch_size, divisor)]
    return dataclasses.replace(
        plan, strides=plan.strides[:num_stages], kernel_sizes=plan.kernel_sizes[:num_stages],
        features_per_stage=plan.features_per_stage[:num_stages],
        n_conv_per_stage_encoder=plan.n_conv_per_stage_encoder[:num_stages],
        n_conv_per_stage_decoder=plan.n_conv_per_stage_decoder[: num_stages - 1], patch_size=tuple(patch),
    )


@dataclass
class PreparedCase:
    """A case at the plan's spacing: normalised image (1, z, y, x), label map (1, z, y, x)."""

    name: str
    image: torch.Tensor
    label: torch.Tensor
    class_locations: dict[int, np.ndarray]  # label index -> (N, 3) voxel indices (z, y, x)
    spacing_zyx: tuple[float, float, float]
    pad_value: float  # what patches read outside the image (0, the inference padding)
    weight: float = 1.0  # relative sampling frequency (the manifest's "weight")


def prepare_case(case: Case, plan: Plan, seed: int = 0, weight: float = 1.0) -> PreparedCase:
    """Preprocess exactly as inference does (medseg.model.preprocess); label map by nearest neighbour."""
    from medseg.model import preprocess

    prep = preprocess.preprocess(case.image, plan)
    labels = np.asarray(case.label_map.array)
    if prep.reorientation is not None:
        labels = prep.reorientation.apply(labels)
    labels = np.transpose(labels, prep.transpose_forward)[prep.bbox]
    new_shape = prep.data.shape[1:]
    # Nearest neighbour on the same (align_corners=False) coordinates as the image resampling.
    indices = [preprocess.nearest_source_indices(n_in, n_out) for n_in, n_out in zip(labels.shape, new_shape)]
    labels = np.ascontiguousarray(labels[np.ix_(*indices)], dtype=np.uint8)
    rng = np.random.default_rng(seed)
    locations = {}
    for value in np.unique(labels):
        if value == 0:
            continue
        where = np.argwhere(labels == value)
        if len(where) > CLASS_LOCATIONS_PER_LABEL:
            where = where[rng.choice(len(where), CLASS_LOCATIONS_PER_LABEL, replace=False)]
        locations[int(value)] = where
    return PreparedCase(
        case.name,
        torch.from_numpy(np.ascontiguousarray(prep.data, dtype=np.float32)),
        torch.from_numpy(labels)[None],
        locations,
        tuple(float(s) for s in prep.spacing_network),
        # Outside the image reads 0, as in nnU-Net and as the sliding window pads at inference
        # (a model trained on air padding mistakes a zero-padded frame for tissue).
        0.0,
        float(weight),
    )


# --------------------------------------------------------------------------------------------
# Sampling


def sample_rng(seed: int, epoch: int, iteration: int, index: int) -> np.random.Generator:
    return np.random.default_rng([seed, epoch, iteration, index])


def pick_case(cases: Sequence[PreparedCase], rng: np.random.Generator) -> PreparedCase:
    """A case drawn in proportion to its weight (uniformly, as nnU-Net does, when all are equal)."""
    weights = [c.weight for c in cases]
    if len(set(weights)) <= 1:
        return cases[int(rng.integers(len(cases)))]
    cumulative = np.cumsum(weights)
    return cases[min(int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right")), len(cases) - 1)]


def draw_sample(
    cases: Sequence[PreparedCase], plan: Plan, config: TrainConfig, global_batch: int,
    epoch: int, iteration: int, index: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample ``index`` of the global batch: the same patch whichever process draws it."""
    rng = sample_rng(config.seed, epoch, iteration, index)
    case = pick_case(cases, rng)
    shape = case.image.shape[1:]
    # nnU-Net: the last `oversample_foreground` of the batch is forced onto a labelled voxel.
    force_foreground = index >= round(global_batch * (1.0 - config.oversample_foreground))
    if force_foreground and case.class_locations:
        labels = sorted(case.class_locations)
        locations = case.class_locations[labels[int(rng.integers(len(labels)))]]
        center = [float(c) for c in locations[int(rng.integers(len(locations)))]]
    else:
        center = [float(rng.uniform(0, n - 1)) if n > 1 else 0.0 for n in shape]
    # Along an axis shorter than the patch, place the image in the patch exactly as the sliding
    # window does at inference (centred, zero-padded): the model must see that frame in training.
    spatial = shape[1:] if plan.dim == 2 else shape
    offset = 1 if plan.dim == 2 else 0
    for axis, (n, p) in enumerate(zip(spatial, plan.patch_size)):
        if n < p:
            center[axis + offset] = float(p // 2 - (p - n) // 2)
    if plan.dim == 2:
        z = int(round(center[0]))
        image, label = case.image[:, z], case.label[:, z]
        return augmented_patch(image, label, center[1:], plan.patch_size, case.spacing_zyx[1:],
                               case.pad_value, rng, _augment_for(plan, config))
    return augmented_patch(case.image, case.label, center, plan.patch_size, case.spacing_zyx,
                           case.pad_value, rng, _augment_for(plan, config))


def _augment_for(plan: Plan, config: TrainConfig) -> AugmentConfig:
    augmentation = config.augmentation
    if augmentation.mirror_axes is None and plan.mirror_axes is not None:
        augmentation = dataclasses.replace(augmentation, mirror_axes=tuple(plan.mirror_axes))
    norm = plan.normalization or {}
    if augmentation.p_tissue_shift > 0 and augmentation.ct_mean_std is None and norm.get("scheme") == "CTNormalization":
        augmentation = dataclasses.replace(augmentation, ct_mean_std=(float(norm["mean"]), float(norm["std"])))
    return augmentation


def local_batch(
    cases: Sequence[PreparedCase], plan: Plan, config: TrainConfig, global_batch: int,
    epoch: int, iteration: int, ctx: DistributedContext,
) -> tuple[torch.Tensor, torch.Tensor]:
    """This process's contiguous share of the global batch."""
    share = global_batch // ctx.world_size
    indices = range(ctx.rank * share, (ctx.rank + 1) * share)
    samples = [draw_sample(cases, plan, config, global_batch, epoch, iteration, i) for i in indices]
    images = torch.stack([s[0] for s in samples]).to(ctx.device, non_blocking=True)
    labels = torch.stack([s[1] for s in samples]).to(ctx.device, non_blocking=True)
    return images, labels


# --------------------------------------------------------------------------------------------
# Validation


def validate(
    network: UNet, cases: Sequence[PreparedCase], plan: Plan, labels: Mapping[int, str],
    device: torch.device, step: float = 0.5, amp: bool = False, cancel: CancelToken | None = None,
) -> dict[str, float]:
    """Sliding-window inference on held-out cases at the plan's spacing; mean Dice per label name."""
    from medseg.model.infer import sliding_window_logits

    was_training, was_ds = network.training, network.deep_supervision
    network.eval()
    network.deep_supervision = False
    per_label: dict[str, list[float]] = {name: [] for value, name in labels.items() if value != 0}
    try:
        with torch.no_grad():
            for case in cases:
                if cancel is not None:
                    cancel.raise_if_cancelled()
                # Tiles batched 8 per pass (2D tiles are small); stitching as at inference.
                logits = sliding_window_logits(network, case.image, plan, step_size=step, tile_batch=8)
                prediction = logits.argmax(0).cpu().numpy()
                scores = dice_per_label(prediction, case.label[0].numpy(), [v for v in labels if v != 0])
                for value, dice in scores.items():
                    if not math.isnan(dice):
                        per_label[labels[value]].append(dice)
    finally:
        network.deep_supervision = was_ds
        network.train(was_training)
    return {name: (float(np.mean(values)) if values else math.nan) for name, values in per_label.items()}


# --------------------------------------------------------------------------------------------
# Checkpoints


def _flatten_optimizer(state: Mapping[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    tensors, scalars = {}, {}
    for index, entry in state["state"].items():
        for key, value in entry.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optimizer.{index}.{key}"] = value.detach().cpu().contiguous()
            else:
                scalars[f"{index}.{key}"] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def _unflatten_optimizer(tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        if name.startswith("optimizer."):
            _, index, key = name.split(".", 2)
            state.setdefault(int(index), {})[key] = value
    for name, value in meta.get("scalars", {}).items():
        index, key = name.split(".", 1)
        state.setdefault(int(index), {})[key] = value
    return {"state": state, "param_groups": meta["param_groups"]}


def save_checkpoint(
    path: Path, network: torch.nn.Module, optimizer: torch.optim.Optimizer, meta: Mapping[str, Any]
) -> None:
    """Weights, optimiser state and progress in one safetensors file, written atomically.

    Write to a temporary file, fsync, then rename over the old one: a crash or cancel at any
    moment leaves either the previous complete checkpoint or the new one, never half a file.
    """
    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in network.state_dict().items()}
    optimizer_tensors, optimizer_meta = _flatten_optimizer(optimizer.state_dict())
    tensors.update(optimizer_tensors)
    metadata = {"medseg_checkpoint": json.dumps({**meta, "optimizer": optimizer_meta})}
    with atomic_path(path) as temporary:
        save_file(tensors, str(temporary), metadata=metadata)


def load_checkpoint(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any] | None, dict[str, Any]]:
    """(model state dict, optimiser state dict, progress metadata) from :func:`save_checkpoint`."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = json.loads((handle.metadata() or {})["medseg_checkpoint"])
        tensors = load_file(str(path))
    except Exception as error:  # noqa: BLE001 - any failure means an unusable checkpoint
        raise ModelError(f"cannot read training checkpoint: {error}", path=path) from error
    model = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    optimizer = _unflatten_optimizer(tensors, metadata.pop("optimizer")) if "optimizer" in metadata else None
    return model, optimizer, metadata


def package_from_checkpoint(
    path: str | Path, name: str, colors: Mapping[int, Sequence[int]] | None = None,
    provenance: Mapping[str, Any] | None = None,
) -> Any:
    """A model package from a training checkpoint (e.g. the best one of a run that is still going)."""
    from medseg.model.package import ModelPackage

    state, _, meta = load_checkpoint(Path(path))
    plan = Plan.from_dict(meta["plan"])
    labels = {int(k): v for k, v in meta["labels"].items()}
    record = {"trained_with": "medseg train", "weights": f"checkpoint {Path(path).name} after epoch "
              f"{int(meta['epoch']) + 1} of {meta.get('epochs')}", "config": meta.get("config"),
              "history": meta.get("history"), **dict(provenance or {})}
    return ModelPackage(name=name, configurations={plan.name: plan}, labels=labels,
                        colors={int(k): tuple(v) for k, v in (colors or {}).items()},
                        weights={plan.name: [state]}, provenance=record)


# --------------------------------------------------------------------------------------------
# Fine-tuning: heads for a changed label set


def adapt_state_to_labels(
    state: Mapping[str, torch.Tensor], network: UNet, base_labels: Mapping[int, str], labels: Mapping[int, str]
) -> tuple[dict[str, torch.Tensor], str | None]:
    """Base weights for a network with ``labels``; output heads rebuilt when the label set changed.

    Rows of the heads for labels the base model knows (matched by name) keep their trained
    weights, new labels start from the fresh initialisation. Returns the state and a message
    (None when the labels are unchanged).
    """
    if [labels[k] for k in sorted(labels)] == [base_labels[k] for k in sorted(base_labels)]:
        return dict(state), None
    fresh = network.state_dict()
    adapted = {k: v for k, v in state.items() if not k.startswith("decoder.seg_layers.")}
    base_index = {name: index for index, name in base_labels.items()}
    kept = []
    for key, value in fresh.items():
        if not key.startswith("decoder.seg_layers."):
            continue
        new = value.clone()
        old = state.get(key)
        if old is not None:
            for index, name in labels.items():
                if name in base_index and base_index[name] < old.shape[0]:
                    new[index] = old[base_index[name]]
                    kept.append(name)
        adapted[key] = new
    added = [n for n in labels.values() if n not in base_index]
    dropped = [n for n in base_labels.values() if n not in labels.values()]
    message = (
        f"label set changed: output heads replaced ({len(labels)} classes instead of {len(base_labels)}); "
        f"kept trained rows for {sorted(set(kept))}, new: {added or 'none'}, dropped: {dropped or 'none'}"
    )
    return adapted, message


# --------------------------------------------------------------------------------------------
# The loop


def _make_optimizer(network: torch.nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    lr = config.resolved_learning_rate()
    if config.optimizer == "sgd":
        return torch.optim.SGD(network.parameters(), lr=lr, momentum=config.momentum, nesterov=True,
                               weight_decay=config.weight_decay)
    if config.optimizer == "adamw":
        return torch.optim.AdamW(network.parameters(), lr=lr, weight_decay=config.weight_decay)
    raise ModelError(f"unknown optimizer '{config.optimizer}' (use sgd or adamw)")


def poly_lr(initial: float, step: int, total: int, exponent: float = POLY_EXPONENT) -> float:
    return initial * (1.0 - min(step, total) / max(total, 1)) ** exponent


def _log(ctx: DistributedContext, messages: list[str], text: str) -> MessageEvent:
    messages.append(text)
    return MessageEvent(text)


def train(
    dataset: Dataset,
    out_dir: str | Path,
    config: TrainConfig | None = None,
    *,
    plan: Plan | None = None,
    base_package: Any = None,
    resume: bool = False,
    plan_options: Mapping[str, Any] | None = None,
    work_dir: str | Path | None = None,
    progress: ProgressCallback | None = None,
    cancel: CancelToken | None = None,
    result: list[TrainResult] | None = None,
    provenance: Mapping[str, Any] | None = None,
) -> Iterator[TrainEvent]:
    """Train a model on ``dataset`` into the package folder ``out_dir`` (a generator of events).

    ``base_package`` (a ModelPackage) fine-tunes: its plan and weights are the start point.
    ``plan`` fixes the plan; otherwise the dataset's fingerprint is planned with
    ``plan_options`` (see :func:`plan_for_dataset`). Checkpoints go to ``work_dir``
    (default: ``<out_dir>.training`` beside the package). ``result``, if given, receives the
    :class:`TrainResult` when the generator finishes. ``provenance`` adds entries to the
    package's provenance (the CLI records its command line there).
    """
    require_training()  # the DirectML build has no PyTorch device to train on
    config = config or TrainConfig()
    out_dir = Path(out_dir)
    ctx = setup_distributed(config.device)
    messages: list[str] = []
    try:
        yield from _train(dataset, out_dir, config, ctx, plan, base_package, resume, plan_options or {},
                          progress, cancel, messages, result, work_dir, dict(provenance or {}))
    finally:
        if ctx.initialized_here and dist.is_initialized():
            dist.destroy_process_group()


def default_work_dir(out_dir: Path) -> Path:
    """Checkpoints live next to the package folder, which is replaced whole when it is written."""
    return out_dir.with_name(out_dir.name + ".training")


def _train(dataset, out_dir, config, ctx, plan, base_package, resume, plan_options, progress, cancel, messages,
           result, work_dir, extra_provenance):
    work_dir = Path(work_dir) if work_dir is not None else default_work_dir(out_dir)
    if ctx.is_main:
        work_dir.mkdir(parents=True, exist_ok=True)
    labels = dict(dataset.labels)
    num_classes = len(labels)
    training_specs = dataset.training_specs
    if not training_specs:
        raise DatasetError("the dataset has no training cases (all are held out for validation)")

    # --- cases and plan -------------------------------------------------------------------
    report(progress, 0.0, "loading cases", "load")
    raw_cases: list[Case] = []
    for spec in training_specs:
        if cancel is not None:
            cancel.raise_if_cancelled()
        case = dataset.load(spec)
        for note in case.notes:
            if "resampled" in note or "no name" in note:
                yield _log(ctx, messages, f"{case.name}: {note}")
        raw_cases.append(case)
    base_labels: dict[int, str] | None = None
    base_state: dict[str, torch.Tensor] | None = None
    if base_package is not None:
        configuration = plan.name if plan is not None else next(iter(base_package.configurations))
        plan = base_package.configurations[configuration]
        base_labels = dict(base_package.labels)
        base_state = dict(base_package.weights[configuration][0])
        yield _log(ctx, messages, f"fine-tuning from '{base_package.name}' (configuration {configuration})")
        if plan.orientation is None:
            plan = dataclasses.replace(plan, orientation=CANONICAL_ORIENTATION)
            yield _log(ctx, messages, f"the base model reads arrays as stored; the fine-tuned model reads every image "
                                      f"in {CANONICAL_ORIENTATION} orientation (a RAS NIfTI and an LPS DICOM then "
                                      "look the same to it)")
    fingerprint = fingerprint_cases(raw_cases, seed=config.seed)
    if plan is None:
        plan = plan_for_dataset(fingerprint, num_classes, **dict(plan_options))
    global_batch = int(config.batch_size or plan.batch_size)
    if global_batch % ctx.world_size:
        raise DatasetError(f"the global batch size {global_batch} does not split evenly over "
                           f"{ctx.world_size} processes")
    cases = [prepare_case(case, plan, seed=config.seed, weight=spec.weight)
             for case, spec in zip(raw_cases, training_specs)]
    del raw_cases
    validation_cases = []
    for spec in dataset.validation_specs:
        case = dataset.load(spec)
        for note in case.notes:
            if "resampled" in note:
                yield _log(ctx, messages, f"{case.name} (validation): {note}")
        validation_cases.append(prepare_case(case, plan, seed=config.seed))

    # --- network, optimiser, resume ------------------------------------------------------------
    torch.manual_seed(config.seed)
    network = build_network(plan, num_classes, deep_supervision=config.deep_supervision).to(ctx.device)
    if base_state is not None:
        state, message = adapt_state_to_labels(base_state, network, base_labels or {}, labels)
        network.load_state_dict(state, strict=True)
        if message:
            yield _log(ctx, messages, message)
    optimizer = _make_optimizer(network, config)
    history: list[dict[str, Any]] = []
    start_epoch, best_dice, best_epoch = 0, -math.inf, None
    last_path, best_path = work_dir / CHECKPOINT_LAST, work_dir / CHECKPOINT_BEST
    if resume:
        if not last_path.is_file():
            raise ModelError("nothing to resume: no checkpoint from an earlier run", path=last_path)
        state, optimizer_state, meta = load_checkpoint(last_path)
        network.load_state_dict(state, strict=True)
        if optimizer_state is not None:
            optimizer.load_state_dict(optimizer_state)
        start_epoch = int(meta["epoch"]) + 1
        history = list(meta.get("history", []))
        best_dice = float(meta["best_mean_dice"]) if meta.get("best_mean_dice") is not None else -math.inf
        best_epoch = meta.get("best_epoch")
        yield _log(ctx, messages, f"resumed after epoch {start_epoch} of {meta.get('epochs')}")
    model: torch.nn.Module = network
    if ctx.distributed:
        model = torch.nn.parallel.DistributedDataParallel(
            network, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None,
            find_unused_parameters=not config.deep_supervision)
    use_amp = bool(config.amp and ctx.device.type == "cuda")
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
    loss_fn = DeepSupervisionLoss(DiceCELoss())
    total_steps = config.epochs * config.iterations_per_epoch
    initial_lr = config.resolved_learning_rate()
    yield _log(ctx, messages, f"{len(cases)} training and {len(validation_cases)} validation cases; "
                              f"global batch {global_batch} over {ctx.world_size} process(es) on {ctx.device}")

    run_started = time.monotonic()
    epochs_done_here = 0
    for epoch in range(start_epoch, config.epochs):
        epoch_started = time.monotonic()
        network.train()
        losses = []
        for iteration in range(config.iterations_per_epoch):
            if cancel is not None:
                cancel.raise_if_cancelled()
            step = epoch * config.iterations_per_epoch + iteration
            lr = poly_lr(initial_lr, step, total_steps)
            for group in optimizer.param_groups:
                group["lr"] = lr
            images, targets = local_batch(cases, plan, config, global_batch, epoch, iteration, ctx)
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(ctx.device.type, enabled=use_amp):
                outputs = model(images)
            loss = loss_fn(outputs, targets)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(network.parameters(), config.grad_clip)
            scaler.step(optimizer)
            scaler.update()
            value = loss.detach()
            if ctx.distributed:
                dist.all_reduce(value)
                value = value / ctx.world_size
            losses.append(float(value))
            done = (step + 1 - start_epoch * config.iterations_per_epoch)
            elapsed = time.monotonic() - run_started
            remaining = (total_steps - step - 1) * elapsed / max(done, 1)
            report(progress, (step + 1) / total_steps,
                   f"epoch {epoch + 1}/{config.epochs} iteration {iteration + 1}/{config.iterations_per_epoch} "
                   f"loss {losses[-1]:.4f} ETA {_format_seconds(remaining)}", "train")
            yield IterationEvent(epoch, iteration, step, total_steps, losses[-1], lr)

        train_seconds = time.monotonic() - epoch_started
        dice: dict[str, float] = {}
        due = (epoch + 1) % max(1, config.validate_every) == 0 or epoch == config.epochs - 1
        if validation_cases and ctx.is_main and due:
            report(progress, (epoch + 1) * config.iterations_per_epoch / total_steps, "validating", "validate")
            dice = validate(network, validation_cases, plan, labels, ctx.device, config.validation_step,
                            use_amp, cancel)
        mean = float(np.nanmean(list(dice.values()))) if dice and not all(math.isnan(v) for v in dice.values()) else math.nan
        is_best = not math.isnan(mean) and mean > best_dice
        if is_best:
            best_dice, best_epoch = mean, epoch
        epochs_done_here += 1
        seconds = time.monotonic() - epoch_started
        per_epoch = (time.monotonic() - run_started) / epochs_done_here
        record = {"epoch": epoch, "train_loss": float(np.mean(losses)), "validation_dice": dice,
                  "mean_dice": None if math.isnan(mean) else mean, "seconds": seconds,
                  "learning_rate": lr, "iteration_losses": losses, "patches_per_second": global_batch * config.iterations_per_epoch / train_seconds}
        history.append(record)
        if ctx.is_main:
            meta = {"epoch": epoch, "epochs": config.epochs, "history": history, "plan": plan.to_dict(),
                    "labels": {str(k): v for k, v in labels.items()}, "config": config.to_dict(),
                    "best_mean_dice": best_dice if best_epoch is not None else None, "best_epoch": best_epoch}
            save_checkpoint(last_path, network, optimizer, meta)
            if is_best:
                save_checkpoint(best_path, network, optimizer, meta)
            atomic_write_text(work_dir / HISTORY_FILE, json.dumps(history, indent=1))
        if ctx.distributed:
            dist.barrier()
        yield EpochEvent(epoch, config.epochs, record["train_loss"], dice, mean,
                         best_dice if best_epoch is not None else math.nan, is_best, seconds,
                         per_epoch * (config.epochs - epoch - 1), record["patches_per_second"])

    # --- export the package ------------------------------------------------------------------
    package_path = None
    if ctx.is_main:
        from medseg.model.package import ModelPackage, save_package

        final_state = {k: v.detach().cpu() for k, v in network.state_dict().items()}
        chosen = "final"
        if best_epoch is not None and best_path.is_file():
            final_state, _, _ = load_checkpoint(best_path)
            chosen = f"best (epoch {best_epoch + 1}, mean Dice {best_dice:.4f})"
        provenance = {
            "trained_with": "medseg train",
            "weights": chosen,
            "dataset": {"name": dataset.name, "source": dataset.source, "description": dataset.description,
                        "training_cases": [s.name for s in training_specs],
                        "validation_cases": [s.name for s in dataset.validation_specs]},
            "fingerprint": fingerprint.to_dict(),
            "config": config.to_dict(),
            "world_size": ctx.world_size,
            "base_model": getattr(base_package, "name", None),
            "history": history,
            "messages": messages,
            **extra_provenance,
        }
        package = ModelPackage(
            name=dataset.name, configurations={plan.name: plan}, labels=labels, colors=dict(dataset.colors),
            weights={plan.name: [final_state]}, provenance=provenance,
        )
        package_path = save_package(package, out_dir)
        yield _log(ctx, messages, f"model package written to {out_dir} ({chosen} weights)")
    if result is not None:
        result.append(TrainResult(package_path, history, best_epoch,
                                  best_dice if best_epoch is not None else math.nan, messages))


def _format_seconds(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def run_training(
    dataset: Dataset, out_dir: str | Path, config: TrainConfig | None = None,
    on_event: Callable[[TrainEvent], None] | None = None, **kwargs: Any,
) -> TrainResult:
    """Run :func:`train` to the end, passing each event to ``on_event``; returns the result."""
    result: list[TrainResult] = []
    for event in train(dataset, out_dir, config, result=result, **kwargs):
        if on_event is not None:
            on_event(event)
    return result[0]
