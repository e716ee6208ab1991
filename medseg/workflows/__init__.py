"""The application's use cases, each in one place: what the command line, batch and the GUI call.

A Qt-free tier above :mod:`medseg.model` and :mod:`medseg.edit` and below :mod:`medseg.batch`,
:mod:`medseg.gui` and :mod:`medseg.cli` (the import-linter contracts in ``pyproject.toml`` say
so). Each use case is a function or a small class with a typed request and a result object;
long ones report progress through :class:`medseg.progress.Progress` and stop on a
:class:`medseg.progress.CancelToken`. An interface parses its arguments or reads its widgets,
calls one of these, and shows the result; a rule added here holds in every interface.

- :mod:`~medseg.workflows.models` — open a model by reference (``open_model``), its card, list models;
- :mod:`~medseg.workflows.studies` — open a study (``open_study``);
- :mod:`~medseg.workflows.checks` — what an image must be before a model runs (spacing, image kind, modality);
- :mod:`~medseg.workflows.segment` — segment a study (``segment_study``, ``Segmenter``);
- :mod:`~medseg.workflows.segmenter` — one model kept loaded for many studies, from Python (``open_segmenter``);
- :mod:`~medseg.workflows.save` — save a segmentation (``plan_save`` then ``save_segmentation``);
- :mod:`~medseg.workflows.evaluate` — score models on labelled cases (``evaluate``);
- :mod:`~medseg.workflows.training_cases` — add the open case to a training set (``add_training_case``);
- :mod:`~medseg.workflows.batch_case` — segment, measure and save one case of a batch (``BatchCase``);
- :mod:`~medseg.workflows.edit_operations` — the model-backed operations of the edit catalogue (``segment``).
- :mod:`~medseg.workflows.statistics`, :mod:`~medseg.workflows.meshes` — label statistics (two definitions), surfaces;
- :mod:`~medseg.workflows.model_export`, :mod:`~medseg.workflows.training`, :mod:`~medseg.workflows.planning` —
  export a model, build a training configuration and train, plan a U-Net for a series;
- :mod:`~medseg.workflows.edit_recipe`, :mod:`~medseg.workflows.name_sets` — edit recipes, the names labels go by;
- :mod:`~medseg.workflows.model_install`, :mod:`~medseg.workflows.pacs` — install/import/remove models; PACS;
- :mod:`~medseg.workflows.devices`, :mod:`~medseg.workflows.outputs`, :mod:`~medseg.workflows.formats`,
  :mod:`~medseg.workflows.deidentify`, :mod:`~medseg.workflows.study_info`, :mod:`~medseg.workflows.split_masks`,
  :mod:`~medseg.workflows.batch_cases` — what the command line and batch need below the use cases (they import
  nothing from ``medseg.io``, ``medseg.model`` or ``medseg.edit`` themselves: an import-linter contract).

Submodules are imported where they are used (``from medseg.workflows.segment import ...``): this
package imports nothing heavy by itself, so the command line starts fast.
"""
