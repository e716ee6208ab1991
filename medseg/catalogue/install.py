"""Install, verify and remove models: from the catalogue's downloads, a pack, a zip or a folder.

Every install runs in one transaction (:class:`_Transaction`): the new version is built in a
hidden staging folder beside the model's record, converted, hashed, renamed into place, and
only then does ``installed.json`` name it (medseg.catalogue.record). Until that last atomic
write the old version stays installed and in use; a failure or a kill -9 at any earlier point
leaves leftovers that the next install of the model removes, and nothing that looks installed.
Downloads stay in ``<models>/.downloads`` between tries so that the next one resumes them.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from medseg.app_dirs import models_dir
from medseg.catalogue.convert import convert
from medseg.catalogue.discover import FoundResult, find_results, match_catalogue
from medseg.catalogue.download import Downloaded, download
from medseg.catalogue.entries import Catalogue, Configuration, ModelEntry, WeightFile, load_catalogue, parse_entry
from medseg.catalogue.folders import find_installed, installed_models, model_folder
from medseg.catalogue.install_measure import measure_installed
from medseg.catalogue.integrity import DamagedWeights, check_tree
from medseg.catalogue.licence_key import (
    check_key,
    check_no_key_needed,
    fetch_licensed,
    needs_key,
    store_key,
    stored_key,
)
from medseg.catalogue.record import InstallRecord, hash_tree, read_record, size_tree, write_record
from medseg.catalogue.unpack import safe_extract
from medseg.errors import LicenceNotAccepted, ModelError, SaveError
from medseg.io.atomic import rename_durably
from medseg.io.digest import sha256_file
from medseg.progress import CancelToken, ProgressCallback, report

try:
    import fcntl
except ImportError:  # Windows: no advisory lock; one install at a time is the user's to keep
    fcntl = None  # type: ignore[assignment]

DOWNLOADS = ".downloads"
PLAIN_FILES = 0  # the results key of a model downloaded as plain files (its folder, as the publisher lays it out)
# The user's answer to a licence: True/False, or a function shown the entry that returns it (a prompt).
Acceptance = bool | Callable[[ModelEntry], bool]


# --- licences ---------------------------------------------------------------------------------
def licence_record(entry: ModelEntry, accept: Acceptance) -> dict[str, Any]:
    """The licence as installed; LicenceNotAccepted before anything is fetched when it needs an
    acceptance the user did not give."""
    licence = entry.licence
    record = {"spdx": licence.spdx, "url": licence.url, "commercial_use": licence.commercial_use,
              "acceptance_required": licence.acceptance_required}
    if needs_key(entry):  # install() with a key says otherwise; every other way in brings weights the user had
        record.update(key_given=False, key_note="installed from weights you already had (a folder, a zip or a "
                                                "pack): no licence key was given")
    if not licence.acceptance_required:
        return record
    accepted = accept(entry) if callable(accept) else bool(accept)
    if not accepted:
        refusal = LicenceNotAccepted(f"{entry.id} is not installed: its licence needs your acceptance. {licence.terms}",
                                     hint=f"read it (`medseg models info {entry.id}`, {licence.url}); "
                                          "if you accept it, install again with --accept-licence")
        refusal.model_id = entry.id  # type: ignore[attr-defined]  # the app shows that entry's licence
        refusal.entry = entry  # type: ignore[attr-defined]  # a local/... import is in no catalogue
        raise refusal
    record.update(accepted_at=_now(), accepted_terms_sha256=hashlib.sha256(licence.terms.encode()).hexdigest(),
                  terms=licence.terms)
    return record


# --- one transaction per model ------------------------------------------------------------------
class _Transaction:
    """Stage a new version of one model; commit renames it in and rewrites the record."""

    def __init__(self, model_id: str, root: Path | None = None) -> None:
        self.root = root or models_dir()
        self.folder = model_folder(self.root, model_id)
        self.model_id = model_id
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self.folder / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise SaveError(f"cannot write the models folder ({error.strerror})", path=self.folder,
                            hint="set MEDSEG_MODELS to a folder you can write") from error
        if fcntl is not None:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as error:
                os.close(self._lock_fd)
                raise ModelError(f"{model_id} is being installed by another medseg right now", path=self.folder,
                                 hint="wait for it to finish") from error
        self._clean_leftovers()
        self.token = secrets.token_hex(4)
        self.staging = self.folder / f".staging-{self.token}"
        self.scratch = self.folder / f".unpack-{self.token}"
        self.staging.mkdir()
        self.scratch.mkdir()

    def _clean_leftovers(self) -> None:
        """What a killed or failed install left: staging folders and versions no record names."""
        record = read_record(self.folder)
        active = record.active if record else None
        for child in self.folder.iterdir():
            if child.name.startswith((".staging-", ".unpack-", ".old-")) or (
                    child.is_dir() and child.name.startswith("v-") and child.name != active):
                shutil.rmtree(child, ignore_errors=True)

    def commit(self, entry: ModelEntry, version: str, converted_run: str | None, parts: dict[str, str],
               configurations: list[str], sources: list[dict[str, Any]], licence: dict[str, Any],
               licence_key: str | None = None) -> InstallRecord:
        shutil.rmtree(self.scratch, ignore_errors=True)  # the unpacked checkpoints never stay
        files = hash_tree(self.staging)
        previous = read_record(self.folder)
        # a staged version is renamed to a name nobody reads yet; the switch is the record's atomic write below
        final = rename_durably(self.staging, self.folder / f"v-{_safe(version)}-{self.token}")
        record = InstallRecord(id=entry.id, version=version, active=final.name, entry=dict(entry.raw), files=files,
                               run=converted_run, parts=parts, configurations=configurations, sources=sources,
                               licence=licence, installed_at=_now(), sizes=size_tree(final, files),
                               folder=self.folder)
        if licence_key is not None:  # beside the record, never in it (medseg.catalogue.licence_key)
            store_key(self.folder, licence_key)
        write_record(record)  # the switch: from here on the new version is the installed one
        if previous is not None and previous.active != final.name:
            shutil.rmtree(self.folder / previous.active, ignore_errors=True)
        return record

    def close(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)
        shutil.rmtree(self.staging, ignore_errors=True)
        if fcntl is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        os.close(self._lock_fd)

    def __enter__(self) -> "_Transaction":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- from the catalogue ---------------------------------------------------------------------------
def install(model_id: str, *, configurations: list[str] | None = None, accept_licence: Acceptance = False,
            licence_key: str | None = None, progress: ProgressCallback | None = None,
            cancel: CancelToken | None = None, catalogue: Catalogue | None = None) -> InstallRecord:
    """Download, verify, unpack, convert and install a catalogue model (all its configurations, or some).

    A TotalSegmentator licensed task needs ``licence_key`` (or the one stored when this model was
    installed with one); it is checked before anything is fetched, and kept with the model."""
    catalogue = catalogue or load_catalogue()
    entry = catalogue.get(model_id)
    if entry.builtin:
        raise ModelError(f"{model_id} ships with medseg: there is nothing to install")
    check_no_key_needed(entry, licence_key)
    key = None
    if needs_key(entry):
        installed = find_installed(model_id)
        key = check_key(entry, licence_key if licence_key is not None else
                        stored_key(installed.folder if installed and not installed.read_only else None))
    licence = licence_record(entry, accept_licence)
    if key is not None:
        licence.update(key_given=True)
        licence.pop("key_note", None)
    elif not entry.downloadable:
        raise ModelError(f"{model_id} cannot be downloaded by medseg. {entry.licence.terms}",
                         hint=f"install the file its publisher gives you: `medseg models install FILE --id {model_id}`")
    wanted = [entry.configuration(n) for n in configurations] if configurations else list(entry.configurations)
    files = entry.files_for([c.name for c in wanted])
    own = {weight.dataset for weight in files}
    files += helper_files(entry, [c.name for c in wanted], catalogue, own)
    root = models_dir()
    downloads = root / DOWNLOADS
    fetched: list[tuple[WeightFile, Downloaded]] = []
    for index, weight in enumerate(files):
        scaled = _scaled(progress, index / len(files) * 0.8, 0.8 / len(files))
        if key is not None and weight.dataset in own:  # a crop network another entry lists is open
            part = downloads / f"licensed-{weight.name}.part"
            got = fetch_licensed(entry, weight, key, part, progress=scaled, cancel=cancel)
        else:
            part = downloads / f"{hashlib.sha256(weight.urls[0].encode()).hexdigest()[:12]}-{weight.name}.part"
            got = download(weight.urls[0], part, expected_sha256=weight.sha256, expected_size=weight.size,
                           progress=scaled, cancel=cancel, what=weight.name)
        fetched.append((weight, got))
    try:
        record = _install_fetched(entry, wanted, fetched, root, licence, key, progress, cancel)
    except DamagedWeights:
        for _weight, got in fetched:  # the published bytes are damaged: a resume would only repeat them
            got.path.unlink(missing_ok=True)
        raise
    for _weight, got in fetched:
        got.path.unlink(missing_ok=True)
    measure_installed([record], progress, cancel)  # its first Segment runs the chosen engine at once
    report(progress, 1.0, f"{model_id} installed", "done")
    return record


def helper_files(entry: ModelEntry, configurations: list[str], catalogue: Catalogue,
                 own: set[int | None]) -> list[WeightFile]:
    """The downloads of the networks ``entry``'s kind needs beyond its own (a TotalSegmentator task's crop
    network, listed by the entry that publishes it, e.g. total's 6 mm one), so that the task installs whole."""
    from medseg.model.kinds import kind_named

    files = []
    for dataset in sorted(kind_named(entry.kind).required_datasets(entry.task, configurations) - own):
        found = [f for other in catalogue.by_dataset(dataset) for f in other.files if f.dataset == dataset]
        if not found:
            raise ModelError(f"{entry.id} needs network {dataset} to run (it crops or refines with it), and no "
                             "catalogue entry lists its download", hint="update medseg's model catalogue")
        files.append(found[0])
    return files


def _install_fetched(entry: ModelEntry, wanted: list[Configuration], fetched: list[tuple[WeightFile, Downloaded]],
                     root: Path, licence: dict[str, Any], key: str | None, progress: ProgressCallback | None,
                     cancel: CancelToken | None) -> InstallRecord:
    with _Transaction(entry.id, root) as transaction:
        results: dict[int, Path] = {}
        for weight, got in fetched:  # side by side in one weights folder, as TotalSegmentator keeps them
            if weight.path:  # a plain file: put where the publisher's layout has it
                target = transaction.scratch / weight.path
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(got.path), target)
                results.setdefault(PLAIN_FILES, transaction.scratch / Path(weight.path).parts[0])
                continue
            report(progress, 0.8, f"unpacking {weight.name}", "unpack")
            before = {r.folder for r in find_results(transaction.scratch)} if results else set()
            safe_extract(got.path, transaction.scratch, cancel=cancel)
            found = {r.dataset: r.folder for r in find_results(transaction.scratch)
                     if r.dataset is not None and r.folder not in before}
            if weight.dataset is not None and weight.dataset not in found:
                _check_unpacked(transaction.scratch, f"the download {weight.name}")  # names what is missing
                raise ModelError(f"{weight.name} holds no nnU-Net result folder of dataset {weight.dataset}",
                                 path=got.path, hint="the published file changed; nothing was installed")
            results.update(found)
        _check_unpacked(transaction.scratch, " and ".join(f"the download {w.name}" for w, _got in fetched))
        converted = convert(entry, wanted, results, transaction.staging, _scaled(progress, 0.85, 0.14), cancel)
        sources = [{"name": weight.name, "url": _source_url(entry, weight, key), "size": got.size,
                    "sha256": got.sha256, "published_sha256": weight.sha256} for weight, got in fetched]
        record = transaction.commit(entry, entry.version, converted.run, converted.parts, converted.configurations,
                                    sources, licence, licence_key=key)
    return record


def _check_unpacked(folder: Path, container: str, origin: Path | None = None) -> None:
    """The weights unpacked into ``folder`` are whole; an error names the file inside ``container``
    (``folder`` is medseg's scratch, gone once the install stops)."""
    try:
        check_tree(folder, find_results(folder))
    except DamagedWeights as error:
        raise error.inside(folder, container, origin) from None


def _source_url(entry: ModelEntry, weight: WeightFile, key: str | None) -> str:
    if key is None:
        return weight.urls[0]
    from medseg.catalogue.licence_key import LICENCE_SERVER, requested_task

    return f"{LICENCE_SERVER} (task {requested_task(entry, weight)}, with your licence key)"


# --- from folders and zips a user already has ----------------------------------------------------
@dataclass
class ImportReport:
    installed: list[InstallRecord] = field(default_factory=list)
    unknown: list[FoundResult] = field(default_factory=list)  # registered under local/... ids


def import_path(path: str | Path, *, model_id: str | None = None, accept_licence: Acceptance = False,
                progress: ProgressCallback | None = None, cancel: CancelToken | None = None,
                catalogue: Catalogue | None = None) -> ImportReport:
    """Register every model found in an nnU-Net result folder, a TotalSegmentator home or weights
    folder, or a zip as TotalSegmentator publishes it, under its catalogue id (``local/<dataset>``
    for networks the catalogue does not know). ``model_id`` keeps only that catalogue entry."""
    report_ = _import_path(Path(path).expanduser(), model_id, accept_licence, progress, cancel,
                           catalogue or load_catalogue())
    measure_installed(report_.installed, progress, cancel)  # their first Segment runs the chosen engine at once
    return report_


def _import_path(path: Path, model_id: str | None, accept_licence: Acceptance, progress: ProgressCallback | None,
                 cancel: CancelToken | None, catalogue: Catalogue) -> ImportReport:
    if path.is_file():
        root = models_dir() / DOWNLOADS / f".import-{secrets.token_hex(4)}"
        root.mkdir(parents=True)
        try:
            safe_extract(path, root, cancel=cancel)
            try:
                return _import_tree(root, path, model_id, accept_licence, progress, cancel, catalogue)
            except DamagedWeights as error:  # the unpacked copy goes: name the file in the user's zip
                raise error.inside(root, path.name, path) from None
        finally:
            shutil.rmtree(root, ignore_errors=True)
    if not path.is_dir():
        raise ModelError("no such folder or zip", path=path)
    return _import_tree(path, path, model_id, accept_licence, progress, cancel, catalogue)


def _import_tree(tree: Path, origin: Path, model_id: str | None, accept: Acceptance,
                 progress: ProgressCallback | None, cancel: CancelToken | None,
                 catalogue: Catalogue) -> ImportReport:
    found = find_results(tree)
    check_tree(tree, found)  # every refusal before any install: a damaged task is not skipped
    if not found:
        raise ModelError("no nnU-Net result folder here (dataset.json, plans.json and fold_*/checkpoint_final.pth)",
                         path=origin)
    interactive = [(r, _interactive_entry(r, catalogue)) for r in found if is_interactive_folder(r.folder)]
    found = [r for r in found if not is_interactive_folder(r.folder)]
    if model_id is not None and any(entry.id == model_id for _r, entry in interactive):
        return _import_interactive([(r, e) for r, e in interactive if e.id == model_id], origin, tree, accept,
                                   progress, cancel)
    if interactive and model_id is None:
        done = _import_interactive(interactive, origin, tree, accept, progress, cancel)
        if not found:
            return done
        rest = _import_tree_results(found, tree, origin, model_id, accept, progress, cancel, catalogue)
        rest.installed[:0] = done.installed
        return rest
    return _import_tree_results(found, tree, origin, model_id, accept, progress, cancel, catalogue)


def _import_tree_results(found: list[FoundResult], tree: Path, origin: Path, model_id: str | None, accept: Acceptance,
                         progress: ProgressCallback | None, cancel: CancelToken | None,
                         catalogue: Catalogue) -> ImportReport:
    matches, unknown = match_catalogue(found, catalogue)
    if model_id is not None:
        matches = [m for m in matches if m.entry.id == model_id]
        if not matches:
            catalogue.get(model_id)
            raise ModelError(f"nothing here completes a configuration of {model_id}", path=origin)
        unknown = []
    licences = {m.entry.id: licence_record(m.entry, accept) for m in matches}  # all refusals before any install
    report_ = ImportReport()
    steps = len(matches) + len(unknown)
    for index, match in enumerate(matches):
        with _Transaction(match.entry.id) as transaction:
            converted = convert(match.entry, match.configurations, {d: r.folder for d, r in match.results.items()},
                                transaction.staging, _scaled(progress, index / steps, 1 / steps), cancel)
            sources = [{"path": str(origin), "folder": str(r.folder.relative_to(tree)) if r.folder != tree else ".",
                        "checkpoint_sha256": _checkpoint_hashes(r.folder)} for r in match.results.values()]
            report_.installed.append(transaction.commit(match.entry, match.entry.version, converted.run,
                                                        converted.parts, converted.configurations, sources,
                                                        licences[match.entry.id]))
    for offset, result in enumerate(unknown):
        entry = _local_entry(result)
        with _Transaction(entry.id) as transaction:
            configuration = entry.configurations[0]
            converted = convert(entry, [configuration], {configuration.datasets[0]: result.folder},
                                transaction.staging, _scaled(progress, (len(matches) + offset) / steps, 1 / steps),
                                cancel)
            sources = [{"path": str(origin), "checkpoint_sha256": _checkpoint_hashes(result.folder)}]
            report_.installed.append(transaction.commit(entry, entry.version, converted.run, converted.parts,
                                                        converted.configurations, sources,
                                                        licence_record(entry, accept)))
        report_.unknown.append(result)
    return report_


def is_interactive_folder(folder: Path) -> bool:
    """An nnInteractive model folder: an nnU-Net result folder that also says how prompts are drawn."""
    return (folder / "inference_session_class.json").is_file() or (folder / "inference_info.json").is_file()


def _interactive_entry(result: FoundResult, catalogue: Catalogue) -> ModelEntry:
    """The catalogue's interactive entry whose published folder this is (``nnInteractive_v1.0``), else a
    ``local/...`` interactive entry (a user's own checkpoint): derived from nnInteractive's weights, it is
    under their licence too (CC BY-NC-SA is share-alike), so that licence is shown and accepted first."""
    published = [e for e in catalogue if e.interactive]
    for entry in published:
        if any(f.path and Path(f.path).parts[0] == result.folder.name for f in entry.files):
            return entry
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", result.folder.name).strip("._-")[:80] or "interactive"
    raw = dict(published[0].raw) if published else {}
    licence = raw.get("licence") or {"spdx": "NOASSERTION", "url": "", "commercial_use": False,
                                     "acceptance_required": False, "terms": "Unknown: imported from a local folder."}
    return parse_entry({
        "id": f"local/{name}", "kind": "nninteractive", "title": f"{result.folder.name} (imported interactive model)",
        "version": "imported", "modality": "CT", "description": f"Imported from {result.folder}.", "structures": [],
        "configurations": [{"name": "interactive", "spacing_mm": None, "datasets": []}], "files": [],
        "licence": licence, "citation": raw.get("citation", ""),
        "medseg_support": {"status": "exact", "note": "an nnInteractive checkpoint run by medseg's own session"}})


def _import_interactive(matches: list[tuple[FoundResult, ModelEntry]], origin: Path, tree: Path, accept: Acceptance,
                        progress: ProgressCallback | None, cancel: CancelToken | None) -> ImportReport:
    licences = {entry.id: licence_record(entry, accept) for _result, entry in matches}  # all refusals first
    report_ = ImportReport()
    for index, (result, entry) in enumerate(matches):
        with _Transaction(entry.id) as transaction:
            configurations = list(entry.configurations[:1])
            converted = convert(entry, configurations, {0: result.folder}, transaction.staging,
                                _scaled(progress, index / len(matches), 1 / len(matches)), cancel)
            sources = [{"path": str(origin), "folder": str(result.folder.relative_to(tree))
                        if result.folder != tree else ".", "checkpoint_sha256": _checkpoint_hashes(result.folder)}]
            report_.installed.append(transaction.commit(entry, entry.version, converted.run, converted.parts,
                                                        converted.configurations, sources, licences[entry.id]))
    return report_


def _local_entry(result: FoundResult) -> ModelEntry:
    """A catalogue entry for a network the catalogue does not know, from its own files."""
    from medseg.io.json_files import read_json_object

    dataset_json = read_json_object(result.folder / "dataset.json", "dataset.json", ModelError)
    labels = {int(v): str(n) for n, v in (dataset_json.get("labels") or {}).items() if isinstance(v, int)}
    name = result.dataset_folder or result.folder.parent.name or result.folder.name
    model_id = "local/" + re.sub(r"[^A-Za-z0-9_.-]", "_", name).strip("._-")[:80]
    return parse_entry({
        "id": model_id, "title": f"{name} (imported nnU-Net model)", "version": "imported",
        "modality": "CT", "description": f"Imported from {result.folder}.",
        "structures": [{"value": v, "name": n, "group": name} for v, n in sorted(labels.items()) if v],
        "configurations": [{"name": result.configuration or "default", "spacing_mm": None,
                            "datasets": [result.dataset if result.dataset is not None else 0]}],
        "files": [],
        "licence": {"spdx": "NOASSERTION", "url": "", "commercial_use": False, "acceptance_required": False,
                    "terms": "Unknown: imported from a local folder; its terms are the ones you got it under."},
        "citation": "", "medseg_support": {"status": "networks", "note": "an nnU-Net model run with nnU-Net's steps"},
    })


def _checkpoint_hashes(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): sha256_file(p) for p in sorted(folder.glob("fold_*/checkpoint_*.pth"))}


# --- verify and remove ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Verification:
    id: str
    folder: Path
    changed: list[str]
    missing: list[str]
    extra: list[str]

    @property
    def ok(self) -> bool:
        return not (self.changed or self.missing or self.extra)


def verify(model_id: str | None = None) -> list[Verification]:
    """Each installed model's files against the hashes recorded when it was installed."""
    if model_id is not None:
        record = find_installed(model_id)
        if record is None:
            raise ModelError(f"{model_id} is not installed")
        records = [record]
    else:
        records = installed_models()
    results = []
    for record in records:
        folder = record.version_folder
        now = hash_tree(folder) if folder.is_dir() else {}
        results.append(Verification(
            record.id, folder,
            changed=sorted(n for n in record.files if n in now and now[n] != record.files[n]),
            missing=sorted(n for n in record.files if n not in now),
            extra=sorted(n for n in now if n not in record.files)))
    return results


def remove(model_id: str) -> Path:
    """Uninstall a model from the user's folder (a system-wide one is IT's to remove)."""
    record = find_installed(model_id)
    if record is None:
        raise ModelError(f"{model_id} is not installed")
    assert record.folder is not None
    if record.read_only:
        raise ModelError(f"{model_id} is installed for every user by your IT; medseg cannot remove it",
                         path=record.folder)
    trash = record.folder.parent / f".old-{record.folder.name}-{secrets.token_hex(4)}"
    rename_durably(record.folder, trash)  # gone at once for every reader; the files follow
    shutil.rmtree(trash, ignore_errors=True)
    return record.folder


# --- helpers -----------------------------------------------------------------------------------------
def _scaled(progress: ProgressCallback | None, start: float, span: float) -> ProgressCallback | None:
    if progress is None:
        return None
    return lambda p: progress(type(p)(start + span * p.fraction, p.text, p.stage))


def _safe(version: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", version)[:40] or "0"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


__all__ = ["install", "import_path", "verify", "remove", "licence_record", "ImportReport", "Verification"]
