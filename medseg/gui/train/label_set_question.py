"""Before Start: the base model's labels a run would not keep, and the offer to keep them."""

from __future__ import annotations

from PySide6.QtWidgets import QMessageBox, QWidget

from medseg.gui.train.run_settings import RunSettings


def label_set_change(settings: RunSettings) -> tuple[str, list[str], list[str]]:
    """(base model's name, labels new to it, labels of it not trained) for these settings."""
    if settings.base is None:
        return "", [], []
    from medseg.model.training.heads import label_set_change as change_of_heads
    from medseg.workflows.models import open_model

    base = open_model(settings.base).package
    added, dropped = change_of_heads(base.names, {i + 1: n for i, n in enumerate(settings.labels)})
    return base.name, added, dropped


def confirm_label_set(settings: RunSettings, parent: QWidget) -> bool:
    """Before Start, not in the log after it: the base model's labels this run would not keep, and the
    offer to keep them (``settings.kept``): the new model is then fine-tuned with them as targets too, so
    it segments them and the new label in one pass (and exports them), rather than running two models."""
    name, added, dropped = label_set_change(settings)
    settings.kept = []
    if not dropped:
        return True
    them = "it" if len(dropped) == 1 else "them"
    keepable = settings.base == "starter"  # its training targets are a rule any CT can be labelled with
    box = QMessageBox(QMessageBox.Icon.Warning, "Labels the new model will not have",
                      f"The base model {name} also segments {', '.join(dropped)}. This run trains only "
                      f"{', '.join(settings.labels)}, so the new model will not segment {them} any more"
                      + (f" (new: {', '.join(added)})" if added else "") + "."
                      + (" Keep them, or start without them?" if keepable else " Start anyway?"),
                      QMessageBox.StandardButton.Cancel, parent)
    if keepable:
        box.setInformativeText(
            f"Keep the model's other labels: the run trains {', '.join(dropped)} too. Cases that hold "
            f"{them} train on their own; in the others the starter's own training targets (its rule-based "
            f"labeller: HU thresholds and connected components) label {them} under your labels.")
        keep = box.addButton("Keep the model's other labels", QMessageBox.ButtonRole.AcceptRole)
        box.setDefaultButton(keep)
    else:
        box.setInformativeText(f"To keep {them}, train on cases that hold {them}: segment each case with "
                               f"{name} first, correct it, then Add current case.")
        keep = None
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
    start = box.addButton("Start without them" if keepable else "Start anyway", QMessageBox.ButtonRole.DestructiveRole)
    box.exec()
    if keep is not None and box.clickedButton() is keep:
        base_order = [n for n in base_label_names(settings) if n in dropped or n in settings.labels]
        settings.kept = [n for n in base_order if n in dropped]
        return True
    return box.clickedButton() is start


def base_label_names(settings: RunSettings) -> list[str]:
    from medseg.workflows.models import open_model

    if settings.base is None:
        return []
    return [n for v, n in sorted(open_model(settings.base).package.names.items()) if v]
