"""Interactive AI segmentation as an editing operation: prompts that an nnInteractive model turns into an object.

:func:`medseg.workflows.edit_operations.register_operations` adds ``prompt`` (the *Interactive AI* tool) to the edit catalogue (``medseg.edit`` never imports
``medseg.model``; this use case joins them). Everything the catalogue gives its operations follows: the
app's *Interactive AI* tool (key I: a click is a point, shift-click a negative one, a drag a box, a
scribble or a lasso by the prompt kind chosen; the object shows as a preview until Apply), undo, locks,
the journal, and ``medseg edit IMAGE -o OUT --prompt point:X,Y,Z[:neg] --prompt box:... --prompt
scribble:FILE`` (every prompt parsed and placed on the image before anything runs; the prompts of one
command refine one object, written into ``--prompt-label``).

The model is a catalogue id (default ``nninteractive/v1.0``, installed with its licence accepted), a
medseg interactive model folder, or an nnInteractive folder. One model is held in memory per path, and
one model session per document and image, so Cancel, Apply and the next object start at once. The app's
model, runtime and mode are the settings model's (``medseg.settings.SETTINGS.interactive_*``); a command gives its own.
"""

from __future__ import annotations

import threading
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from medseg.core.label_values import MAX_LABEL_VALUE
from medseg.edit.operation import Change, Context, EditOperation, Parameter
from medseg.edit.prompt_session import MASK_KINDS, Prompt, PromptSession
from medseg.errors import MedsegError, ModelError
from medseg.progress import CancelToken, ProgressCallback
from medseg.settings import DEFAULT_INTERACTIVE_MODEL, INTERACTIVE_MODES, INTERACTIVE_RUNTIMES, SETTINGS

OPERATION = "prompt"
DEFAULT_MODEL, RUNTIME_CHOICES, MODE_CHOICES = DEFAULT_INTERACTIVE_MODEL, INTERACTIVE_RUNTIMES, INTERACTIVE_MODES
_lock = threading.Lock()
_models: dict[str, Any] = {}  # resolved path -> InteractiveModel (103 M parameters: read once)
_engines: "weakref.WeakKeyDictionary[Any, ModelEngine]" = weakref.WeakKeyDictionary()  # document -> its engine
_objects: "weakref.WeakKeyDictionary[Any, tuple[tuple, PromptSession]]" = weakref.WeakKeyDictionary()  # edit: one object


def model_folder(reference: str | Path | None = None) -> Path:
    """The folder of an interactive model: a catalogue id (installed), or a path."""
    from medseg.catalogue import load_catalogue
    from medseg.workflows.models import model_path

    reference = str(reference or DEFAULT_MODEL)
    if not Path(reference).expanduser().exists() and reference in load_catalogue():
        from medseg.catalogue.folders import find_installed

        if find_installed(reference) is None:
            raise ModelError(f"the interactive model {reference} is not installed",
                             hint="Segmentation ▸ Models… installs it (from the internet, a pack or its folder) "
                                  f"once you accept its licence; or `medseg models install {reference}`")
    return model_path(reference)


def open_interactive_model(reference: str | Path | None = None):
    """The interactive model (read once per folder and kept)."""
    from medseg.model.interactive.model_files import load_interactive_model

    folder = model_folder(reference).resolve()
    with _lock:
        model = _models.get(str(folder))
        if model is None:
            model = _models[str(folder)] = load_interactive_model(folder)
    return model


class ModelEngine:
    """A :class:`~medseg.edit.prompt_session.PromptEngine` backed by medseg's interactive session."""

    def __init__(self, model, image: np.ndarray, runtime: str = "auto", device: str = "auto"):
        from medseg.model.interactive.session import InteractiveSession

        self.session = InteractiveSession(model, device, runtime=runtime)
        self.session.set_image(image)
        self.image = image
        self.key = (id(model), runtime, device)
        self.mode: str | None = None  # exact or small-first; None: the app's setting at each prompt
        self.last_result = None  # the last prompt's PromptResult (which patches it ran)

    @property
    def runtime(self) -> str:
        return self.session.runtime

    @property
    def runtime_reason(self) -> str:
        return self.session.runtime_reason

    @property
    def mask(self) -> np.ndarray:
        return self.session.mask

    def follow_mode(self) -> None:
        """The session takes the mode chosen (the command's, else the app's setting now)."""
        self.session.small_first = (self.mode or SETTINGS.interactive_mode) == "small-first"

    def add(self, prompt: Prompt, cancel: CancelToken | None = None, progress: ProgressCallback | None = None):
        session = self.session
        self.follow_mode()
        session.cancel_with(cancel)
        session.progress_with(progress)
        try:
            if prompt.kind == "point":
                result = session.add_point(prompt.point, prompt.positive)
            elif prompt.kind == "box":
                result = session.add_box([list(b) for b in prompt.box], prompt.positive)
            elif prompt.kind == "scribble":
                result = session.add_scribble(prompt.mask, prompt.origin, prompt.positive)
            else:
                result = session.add_lasso(prompt.mask, prompt.origin, prompt.positive)
        finally:
            session.cancel_with(None)
            session.progress_with(None)
        self.last_result = result
        if result.changed is None:
            return None
        return tuple(lo for lo, _ in result.changed), tuple(hi for _, hi in result.changed)

    def new_object(self) -> None:
        self.session.new_object()

    def cost(self, prompt: Prompt):
        """What ``prompt`` will cost here (:class:`~medseg.model.interactive.cost.PromptCost`), before it runs."""
        self.follow_mode()
        return self.session.cost(prompt.extent())


def engine_for(document, reference: str | Path | None = None, runtime: str | None = None,
               mode: str | None = None) -> ModelEngine:
    """The document's engine for its image (made on first use, then kept while the image stays). ``mode``
    (exact or small-first): the command line's; None follows the app's setting."""
    if document.volume is None:
        raise MedsegError("open an image before prompting")
    runtime = runtime or SETTINGS.interactive_runtime
    model = open_interactive_model(reference or SETTINGS.interactive_model)
    engine = _engines.get(document)
    if engine is None or engine.image is not document.volume.array or engine.key[:2] != (id(model), runtime):
        engine = ModelEngine(model, document.volume.array, runtime)
        _engines[document] = engine
    engine.mode = mode
    return engine


# --- what a prompt will cost, said before it runs ------------------------------------------------------
def prompt_cost(document, prompt: Prompt | None = None):
    """What ``prompt`` (None: a click) will cost with the app's model on ``document``'s image, from this computer's
    measurements: the document's engine once it ran a prompt (its own last pass), else the model folder's
    calibration record (read without loading the model). None when the model is not installed or unreadable."""
    try:
        folder = model_folder(SETTINGS.interactive_model).resolve()  # not installed: said before PyTorch is imported
    except MedsegError:
        return None
    from medseg.model.interactive.cost import prompt_cost as estimate
    from medseg.model.interactive.runtimes import measured_pass_seconds, runtime_for_folder
    from medseg.model.interactive.session import CALIBRATED

    prompt = prompt or Prompt("point", point=(0.0, 0.0, 0.0))
    engine = _engines.get(document) if document is not None else None
    try:
        if engine is not None and engine.key[:2] == (id(_models.get(str(folder))), SETTINGS.interactive_runtime):
            return engine.cost(prompt)
        patch = _patch_size(folder)
        if patch is None:
            return None
        runtime, _why = runtime_for_folder(folder, SETTINGS.interactive_runtime)
    except MedsegError:
        return None
    seconds = measured_pass_seconds(folder, runtime)
    return estimate(prompt.extent(), patch, seconds, CALIBRATED, small_first=SETTINGS.interactive_mode == "small-first")


def _patch_size(folder: Path) -> tuple[int, ...] | None:
    """The model's patch, from the model held in memory or its small metadata file (never its weights)."""
    held = _models.get(str(folder))
    if held is not None:
        return tuple(int(p) for p in held.plan.patch_size)
    from medseg.model.interactive.model_files import read_patch_size

    return read_patch_size(folder)


# --- the command line's values ---------------------------------------------------------------------
def parse_prompt_text(text: str, image) -> Prompt:
    """``point:X,Y,Z[:neg]``, ``box:...``, ``scribble:FILE``, ``lasso:FILE`` placed on ``image`` (a mask file
    read and checked on the image's grid); MedsegError naming the prompt or the file."""
    from medseg.model.interactive.prompt_spec import parse_prompt, resolve_prompt

    spec = parse_prompt(text)
    if image is None:
        raise MedsegError(f"prompt {text!r} needs the image")
    mask = None
    if spec.kind in MASK_KINDS:
        from medseg.io import load

        path = Path(spec.path)
        if not path.is_file():
            raise MedsegError(f"the {spec.kind} mask file does not exist", path=path)
        mask = load(path)
    voxel = resolve_prompt(spec, image, mask)
    box = tuple(tuple(b) for b in voxel.box) if voxel.box is not None else None
    return Prompt(voxel.kind, voxel.positive, point=voxel.point, box=box, mask=voxel.mask,  # type: ignore[arg-type]
                  origin=tuple(voxel.origin))  # type: ignore[arg-type]


def _check(values: dict) -> None:
    runtime = values.get("interactive_runtime") or "auto"
    if runtime not in RUNTIME_CHOICES:
        raise MedsegError(f"--interactive-runtime must be one of {', '.join(RUNTIME_CHOICES)}, not {runtime!r}")
    mode = values.get("interactive_mode") or "exact"
    if mode not in MODE_CHOICES:
        raise MedsegError(f"--interactive-mode must be one of {', '.join(MODE_CHOICES)}, not {mode!r}")


def _run(document, values: dict, context: Context) -> Change:
    """One prompt of ``medseg edit``: it refines the command's object, and the change is that object in its label."""
    label = int(values["prompt_label"])
    reference = values.get("interactive_model") or DEFAULT_MODEL
    runtime = values.get("interactive_runtime") or "auto"
    mode = values.get("interactive_mode") or "exact"
    key = (str(reference), runtime, mode, label, context.rules)
    held = _objects.get(document)
    if held is None or held[0] != key:
        engine = engine_for(document, reference, runtime, mode)
        held = (key, PromptSession(document, engine, label, context.rules or _default_rules()))
        _objects[document] = held
    session = held[1]
    prompt = values["prompt"]
    engine = session.engine()
    cautions: tuple[str, ...] = ()
    if isinstance(engine, ModelEngine):  # said before the prompt runs (it can take minutes on a CPU)
        engine.follow_mode()
        if not session.prompts:
            document.announce(f"interactive runtime: {engine.runtime} ({engine.runtime_reason}); "
                              f"{engine.session.mode_text}", "warning")
        document.announce(f"prompt {len(session.prompts) + 1} ({prompt.describe()}): {engine.cost(prompt).text()}",
                          "warning")
    # each pass as it starts (a prompt can take minutes on a CPU); its end is the next one's start
    session.progress = lambda step: document.announce(step.text, "warning") if step.stage != "pass-end" else None
    session.add(prompt)
    preview = session.compute()
    result = getattr(engine, "last_result", None)
    if mode == "small-first" and result is not None:
        patch = "x".join(map(str, result.first_patch))
        cautions += (f"prompt {len(session.prompts)}: {result.mode} (first pass {patch}, {result.passes} "
                     f"pass{'es' if result.passes != 1 else ''})",)
    return Change(preview.delta if preview is not None else None, cautions=cautions)


def _default_rules():
    from medseg.edit.tools import PaintRules

    return PaintRules()


PROMPT = Parameter("prompt", "PROMPT", "prompt-spec", "the prompt drawn", parse=parse_prompt_text)
PROMPT_LABEL = Parameter("prompt_label", "LABEL", "new-label", "Label the object goes into", "", 1, MAX_LABEL_VALUE, 1,
                         1, decimals=0, option="--prompt-label")  # the app: the active label
MODEL = Parameter("interactive_model", "MODEL", "text", "Interactive model (catalogue id or folder)",
                  default=DEFAULT_MODEL, option="--interactive-model")
RUNTIME = Parameter("interactive_runtime", "RUNTIME", "text", "Interactive runtime: " + ", ".join(RUNTIME_CHOICES),
                    default="auto", option="--interactive-runtime")
MODE = Parameter("interactive_mode", "MODE", "text",
                 "Interactive mode: exact (nnInteractive's patch) or small-first (a small object's prompt on half the "
                 "patch first, the exact patch when its answer reaches that patch's faces; faster, not exact)",
                 default="exact", option="--interactive-mode")

INTERACTIVE = EditOperation(
    OPERATION, "Interactive AI",
    "refine an object with a prompt that an nnInteractive model turns into 3D: PROMPT is point:X,Y,Z[:neg], "
    "box:X0,Y0,Z0,X1,Y1,Z1[:neg] (two corners on one slice), scribble:FILE[:neg] or lasso:FILE[:neg] (a mask on the "
    "image's grid); X,Y,Z in patient mm (LPS). The prompts of one command refine one object, written into "
    "--prompt-label (default 1) where no locked label is; --interactive-model (default nninteractive/v1.0) and "
    "--interactive-runtime (default: the model's measured choice), --interactive-mode exact|small-first (default exact)",
    (PROMPT, PROMPT_LABEL, MODEL, RUNTIME, MODE), _run, modifies=("prompt_label",), gesture="prompts", shortcut="I",
    check=_check, engine=lambda document: engine_for(document))


__all__ = ["DEFAULT_MODEL", "INTERACTIVE", "MODE_CHOICES", "ModelEngine", "engine_for", "model_folder", "open_interactive_model",
           "parse_prompt_text"]
