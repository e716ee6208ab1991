"""The model package as data: configurations, labels, per-fold weights, provenance.

Its labels are :class:`~medseg.core.labels.Label` records (name, colour, coded concept as the
package states it), value 0 the background: the one label type, from ``model.json`` to a DICOM SEG.

The type and its consistency checks, without any file format: ``medseg.model.package``
reads and writes it, ``medseg.model.nnunet_import`` builds it from an nnU-Net result
folder; both import this module and neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from medseg.core.labels import Code, Label, Provenance
from medseg.errors import ModelError
from medseg.model.configuration_choice import ConfigurationChoice, choose_configuration
from medseg.model.plan import Plan
from medseg.model.postprocess import PostprocessStep, parse_steps
from medseg.model.unet import UNet


@dataclass
class ModelPackage:
    """A segmentation model: configurations, labels, per-fold weights and provenance."""

    name: str
    configurations: dict[str, Plan]
    labels: dict[int, Label]  # value -> label, 0 = background (a name alone is taken as a Label without a code)
    weights: dict[str, list[dict[str, torch.Tensor]]] = field(default_factory=dict)
    onnx: dict[str, bytes | Path] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    source_path: Path | None = None
    # model.json's "postprocessing" steps as written (medseg.model.postprocess validates them)
    postprocessing: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.labels = package_labels(self.labels)

    @property
    def names(self) -> dict[int, str]:
        """Value -> name, background included (for lookups by name: post-processing, training heads)."""
        return {value: label.name for value, label in self.labels.items()}

    @property
    def version(self) -> str:
        """What the saved segments name as the algorithm's version ("" when the package says nothing)."""
        return str(self.provenance.get("version") or self.provenance.get("weights") or "")

    def label_table(self, values: Sequence[int] | None = None) -> dict[int, Label]:
        """The model's labels (background excluded; only ``values`` when given) as this model's output:
        the one place where the package's names and colours become label descriptions."""
        made_by = Provenance.model(self.name, self.version)
        wanted = None if values is None else {int(v) for v in values}
        return {value: replace(label, provenance=made_by)
                for value, label in sorted(self.labels.items()) if value and (wanted is None or value in wanted)}

    @property
    def num_classes(self) -> int:
        """Network outputs: one per label, background included (labels are 0..N-1)."""
        return len(self.labels)

    def num_folds(self, config_name: str) -> int:
        return len(self.weights.get(config_name, []))

    def select(self, spacing_zyx: Sequence[float], shape_zyx: Sequence[int] | None = None) -> Plan:
        """The configuration that suits a series of this spacing (among those with weights)."""
        return self.choose(spacing_zyx, shape_zyx).chosen

    def choose(self, spacing_zyx: Sequence[float], shape_zyx: Sequence[int] | None = None) -> ConfigurationChoice:
        """:meth:`select` with the reasons (each configuration's target against the series)."""
        usable = {name: plan for name, plan in self.configurations.items() if self.num_folds(name)}
        return choose_configuration(usable or self.configurations, spacing_zyx, shape_zyx)

    def postprocess_steps(self) -> list[PostprocessStep]:
        """The declared post-processing steps, validated against the labels."""
        return parse_steps(self.postprocessing, self.names, self.source_path)

    def validate(self, where: str | Path | None = None) -> None:
        """Raise ModelError if labels, configurations and weights do not fit together."""
        values = sorted(self.labels)
        if not values or values != list(range(len(values))) or values[0] != 0:
            raise ModelError(f"labels must be numbered 0..N-1 with 0 = background, got {values}", path=where)
        if len(values) < 2:
            raise ModelError("a segmentation model needs at least one foreground label", path=where)
        if not self.configurations:
            raise ModelError("the model has no configurations", path=where)
        for config_name, folds in self.weights.items():
            if config_name not in self.configurations:
                raise ModelError(f"weights for unknown configuration {config_name!r}", path=where)
            expected = _expected_shapes(self.configurations[config_name], self.num_classes)
            for index, state in enumerate(folds):
                _check_state_dict(state, expected, f"configuration {config_name!r}, fold {index}", where)
        for config_name in self.onnx:
            if config_name not in self.configurations:
                raise ModelError(f"ONNX model for unknown configuration {config_name!r}", path=where)
        parse_steps(self.postprocessing, self.names, where)


# --- weights validation ---------------------------------------------------------------
def _expected_shapes(plan: Plan, num_classes: int) -> dict[str, tuple[int, ...]]:
    # Built on the meta device: shapes without allocating or initialising any weights.
    with torch.device("meta"):
        network = UNet(plan, num_classes)
    return {key: tuple(tensor.shape) for key, tensor in network.state_dict().items()}


def parameter_count(plan: Plan, num_classes: int) -> int:
    """Values in one network of ``plan`` (built on the meta device: nothing is allocated)."""
    total = 0
    for shape in _expected_shapes(plan, num_classes).values():
        count = 1
        for extent in shape:
            count *= extent
        total += count
    return total


def _check_state_dict(state: dict[str, torch.Tensor], expected: dict[str, tuple[int, ...]], what: str,
                      where: str | Path | None) -> None:
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ModelError(
            f"{what}: weights do not fit the network "
            f"(missing {missing[:3]}{'...' if len(missing) > 3 else ''}, "
            f"unexpected {unexpected[:3]}{'...' if len(unexpected) > 3 else ''})",
            path=where,
        )
    for key, shape in expected.items():
        if tuple(state[key].shape) != shape:
            raise ModelError(f"{what}: {key} has shape {tuple(state[key].shape)}, the plan needs {shape}", path=where)


# --- one model from several ----------------------------------------------------------------
def combine_packages(packages: Sequence[ModelPackage], name: str | None = None) -> ModelPackage:
    """One model holding every configuration of ``packages`` (e.g. a thin- and a thick-slice 3D
    configuration trained one by one), so that the series' spacing can choose between them.

    The packages must segment the same labels (same values, same names) and declare the same
    post-processing (it applies to whichever configuration runs); configuration names must
    differ (``medseg train --configuration-name`` names them). Each configuration keeps its
    own package's provenance under ``provenance["configurations"][name]``.
    """
    if not packages:
        raise ModelError("no model packages to combine")
    first = packages[0]
    configurations: dict[str, Plan] = {}
    weights: dict[str, list[dict[str, torch.Tensor]]] = {}
    onnx: dict[str, bytes | Path] = {}
    per_configuration: dict[str, Any] = {}
    for package in packages:
        where = package.source_path or package.name
        if package.names != first.names:
            raise ModelError(
                f"cannot combine: its labels {_label_text(package.names)} differ from "
                f"{first.source_path or first.name}'s {_label_text(first.names)}", path=where)
        if package.postprocessing != first.postprocessing:
            raise ModelError(
                f"cannot combine: its post-processing {package.postprocessing} differs from "
                f"{first.source_path or first.name}'s {first.postprocessing}", path=where)
        for config_name, plan in package.configurations.items():
            if config_name in configurations:
                raise ModelError(
                    f"cannot combine: configuration {config_name!r} is in more than one of the packages",
                    path=where, hint="train each with its own --configuration-name")
            configurations[config_name] = plan
            if config_name in package.weights:
                weights[config_name] = package.weights[config_name]
            if config_name in package.onnx:
                onnx[config_name] = package.onnx[config_name]
            per_configuration[config_name] = {k: v for k, v in package.provenance.items() if k != "configurations"}
    provenance = {"combined_from": [str(p.source_path or p.name) for p in packages],
                  "configurations": per_configuration}
    combined = ModelPackage(name=name or first.name, configurations=configurations, labels=dict(first.labels), weights=weights, onnx=onnx, provenance=provenance,
                            postprocessing=list(first.postprocessing))
    combined.validate()
    return combined


def package_labels(labels: Mapping[int, str | Label], colors: Mapping[int, Sequence[int]] | None = None,
                   codes: Mapping[int, tuple[Code | None, Code | None]] | None = None) -> dict[int, Label]:
    """A model's label table, by value (0 = background, black): Labels kept as they are, names made into
    Labels with ``colors`` (else the one colour table's) and ``codes`` (category, type; else none)."""
    table: dict[int, Label] = {}
    for key, given in labels.items():
        value = int(key)
        label = given if isinstance(given, Label) else Label(value, str(given))
        changes: dict[str, Any] = {}
        if colors and value in colors:
            changes["color"] = tuple(int(c) for c in colors[value])
        elif value == 0 and not isinstance(given, Label):
            changes["color"] = (0, 0, 0)
        if codes and value in codes:
            changes["category"], changes["type"] = codes[value]
        table[value] = replace(label, value=value, **changes) if changes or label.value != value else label
    return dict(sorted(table.items()))


def _label_text(labels: dict[int, str]) -> str:
    return "{" + ", ".join(f"{value}: {name}" for value, name in sorted(labels.items())) + "}"
