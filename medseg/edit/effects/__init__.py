"""The stateful mouse tools, one module each (3D Slicer's one class per Segment Editor effect): each holds its
state, what it does with the mouse, what it draws over a slice and its options (:mod:`.base`).

:data:`EFFECTS` is the registry: a catalogue operation names its effect as its ``gesture``
(:attr:`medseg.edit.operation.EditOperation.gesture`), the tool controller builds one object of each and forwards
the mouse to the active tool's, the slice views draw what each shows, and the Edit panel builds each one's option
forms. A new tool is a catalogue entry naming an effect here, and, when it needs a new kind of state, one module
here registered with :func:`register_effect`.
"""

from __future__ import annotations

from medseg.edit.effects.base import Effect, Form
from medseg.edit.effects.click import Click
from medseg.edit.effects.outline import Outline
from medseg.edit.effects.prompts import Prompts
from medseg.edit.effects.seeds import GrowFromSeeds
from medseg.edit.effects.stroke import Stroke
from medseg.errors import MedsegError

EFFECTS: dict[str, type[Effect]] = {}


def register_effect(effect: type[Effect]) -> type[Effect]:
    """Add an effect (a class of :mod:`.base`'s :class:`Effect`); refused when its name, an option's or a form's
    is taken. Tool controllers built afterwards have it."""
    if not effect.name or effect.name in EFFECTS:
        raise MedsegError(f"an effect needs a name of its own, not {effect.name!r}")
    taken_options = {p.name for known in EFFECTS.values() for p in known.options}
    taken_forms = {f.name for known in EFFECTS.values() for f in known.forms}
    for name in {p.name for p in effect.options} & taken_options | {f.name for f in effect.forms} & taken_forms:
        raise MedsegError(f"{effect.name}: {name!r} is another effect's already")
    EFFECTS[effect.name] = effect
    return effect


BUILT_IN = (Stroke, Click, Outline, GrowFromSeeds, Prompts)
for _effect in BUILT_IN:
    register_effect(_effect)


def unregister_effect(name: str) -> None:
    """Take a registered effect out again (a plug-in unloaded; tests). The built-in ones stay."""
    if any(effect.name == name for effect in BUILT_IN):
        raise MedsegError(f"{name!r} is a built-in effect")
    EFFECTS.pop(name, None)


def forms() -> dict[str, Form]:
    """Every effect's option forms, by name, in the registry's order."""
    return {form.name: form for effect in EFFECTS.values() for form in effect.forms}


def forms_of(operation) -> list[str]:
    """The option forms the tool of ``operation`` shows (none for Navigate, ``operation`` None): those that hold
    one of its settings, those that name it, and those its effect asks for."""
    if operation is None:
        return []
    declared = {p.name for p in operation.settings}
    shows = EFFECTS[operation.gesture].shows
    return [name for name, form in forms().items()
            if declared & form.fields or operation.name in form.tools or name in shows]


__all__ = ["BUILT_IN", "EFFECTS", "Effect", "Form", "forms", "forms_of", "register_effect", "unregister_effect"]
