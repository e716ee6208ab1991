"""De-identification for research exports: DICOM PS3.15 Basic Application Level Confidentiality Profile.

Which attribute gets which action (remove, empty, dummy, new UID) comes from the standard's
table E.1-1 as dicom-anonymizer ships it (``dicomfields_2026c``); this module only decides
*how* the actions are carried out so that an export stays usable:

- **UIDs are replaced by a keyed function of the original** (HMAC-SHA256 with the user's key,
  as a ``2.25.`` UID). The same source UID becomes the same new UID in every file, every
  process and every rerun, so a DICOM SEG still references its de-identified source series,
  and nobody without the key can link a new UID back to the original.
- **Sequences that reference instances** (Source Image Sequence, Referenced Image Sequence:
  action X/Z/U*) keep their items with the UIDs inside replaced, which the profile allows and
  a SEG needs (its frames point at their source images). Every other sequence's items are
  de-identified with the same table, recursively.
- **The Patient ID becomes a keyed pseudonym** (the same patient keeps one pseudonym, so a
  study can still be grouped by patient); every other identifying value is emptied or given
  the profile's dummy value, dates included. Private elements are removed.

A re-identification mapping (pseudonym -> source) is written only when asked, and only
encrypted with the user's key (Fernet: AES-128-CBC + HMAC-SHA256, from ``cryptography``).
No function here logs a value it reads.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Iterable
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from medseg.core.volume import Volume, VolumeMeta
from medseg.errors import MedsegError, SaveError
from medseg.io.atomic import atomic_write_bytes, sync_file

PROFILE_TABLE = "dicomfields_2026c"  # PS3.15 2026c, table E.1-1, as dicom-anonymizer 2.1 ships it
METHOD = "medseg: DICOM PS3.15 Basic Application Level Confidentiality Profile; keyed UIDs and patient pseudonym"
KEY_BYTES = 32
_PATIENT_ID = 0x00100020
_PATIENT_NAME = 0x00100010
_MAPPING_FORMAT = "medseg-reid/1"


class DeidentificationKeyError(MedsegError):
    """The de-identification key is missing, unreadable or in the wrong place."""


def load_or_create_key(path: str | os.PathLike, forbidden_under: Iterable[str | os.PathLike] = ()) -> tuple[bytes, bool]:
    """The key in ``path`` (created with 32 random bytes, readable by the owner only, when absent).

    Returns (key, created). A key inside a folder in ``forbidden_under`` (the export) is refused:
    whoever receives the export must not receive the key with it.
    """
    path = Path(path).expanduser()
    resolved = path.resolve()
    for folder in forbidden_under:
        folder = Path(folder).expanduser().resolve()
        if resolved == folder or folder in resolved.parents:
            raise DeidentificationKeyError("the key file must not be inside the output folder (it would travel with the export)",
                            path=path, hint="keep it somewhere only you can read, e.g. ~/medseg-study.key")
    if path.is_file():
        try:
            text = path.read_text(encoding="ascii").strip()
            key = bytes.fromhex(text)
        except (OSError, ValueError, UnicodeError) as error:
            raise DeidentificationKeyError(f"cannot read the key ({error})", path=path,
                            hint="the file must hold the hex key medseg wrote; give another path to create a new key"
                            ) from error
        if len(key) < 16:
            raise DeidentificationKeyError("the key is too short (at least 16 bytes, as hex)", path=path)
        return key, False
    if not path.parent.is_dir():
        raise DeidentificationKeyError("the key's folder does not exist", path=path.parent)
    key = secrets.token_bytes(KEY_BYTES)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as error:
        raise DeidentificationKeyError(f"cannot create the key file ({error.strerror})", path=path) from error
    # created, never replaced (O_EXCL: a key another process made meanwhile is not overwritten), so not through
    # atomic_path's rename; synced by the same module
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(key.hex() + "\n")
        sync_file(handle)
    return key, True


@lru_cache(maxsize=1)
def _profile() -> tuple[dict[int, str], list[tuple[int, int, int, int, str]]]:
    """Action letter by tag, and the repeating-group rules (group, element, group mask, element mask, action)."""
    from dicomanonymizer.dicomfields_selector import dicom_anonymization_database_selector

    table = dicom_anonymization_database_selector(PROFILE_TABLE)
    letters = {"D_TAGS": "D", "Z_TAGS": "Z", "X_TAGS": "X", "U_TAGS": "U", "Z_D_TAGS": "D", "X_Z_TAGS": "Z",
               "X_D_TAGS": "D", "X_Z_D_TAGS": "D", "X_Z_U_STAR_TAGS": "U*"}
    by_tag: dict[int, str] = {}
    groups: list[tuple[int, int, int, int, str]] = []
    for category, letter in letters.items():
        for tag in table[category]:
            if len(tag) == 4:
                groups.append((tag[0], tag[1], tag[2], tag[3], letter))
            else:
                by_tag[tag[0] << 16 | tag[1]] = letter
    return by_tag, groups


def profile_tags() -> set[int]:
    """Every single tag the Basic Profile acts on (for checks and tests)."""
    return set(_profile()[0])


class Deidentifier:
    """Applies the Basic Profile with keyed UIDs and pseudonyms; one per export (its key)."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise DeidentificationKeyError("the de-identification key is too short")
        self._key = bytes(key)

    def _digest(self, kind: str, value: str) -> bytes:
        return hmac.new(self._key, f"{kind}\0{value}".encode("utf-8", "surrogateescape"), hashlib.sha256).digest()

    def pseudonym(self, kind: str, value: str, length: int = 12) -> str:
        """A stable, key-dependent stand-in for ``value`` (hex, ``length`` characters)."""
        return self._digest(kind, value).hex()[:length]

    def uid(self, original: str) -> str:
        """The replacement for a UID: ``2.25.<128-bit keyed hash>`` (empty stays empty)."""
        original = str(original or "").strip().rstrip("\0")
        if not original:
            return ""
        return "2.25." + str(int.from_bytes(self._digest("uid", original)[:16], "big"))

    def patient_id(self, original: str) -> str:
        return "P" + self.pseudonym("patient", str(original or ""), 15)

    @property
    def fingerprint(self) -> str:
        """Identifies the key (not the key): outputs made with another key are not reused."""
        return self.pseudonym("fingerprint", "", 16)

    # --- DICOM datasets -------------------------------------------------------------------------

    def dataset(self, dataset: Any) -> Any:
        """De-identify a pydicom Dataset in place (file meta included); returns it."""
        from pydicom.sr.codedict import codes

        self._walk(dataset, set())
        dataset.remove_private_tags()
        meta = getattr(dataset, "file_meta", None)
        if meta is not None and "MediaStorageSOPInstanceUID" in meta:
            meta.MediaStorageSOPInstanceUID = dataset.get("SOPInstanceUID") or self.uid(meta.MediaStorageSOPInstanceUID)
        dataset.PatientIdentityRemoved = "YES"
        dataset.DeidentificationMethod = METHOD[:64]
        from pydicom.dataset import Dataset

        item = Dataset()
        profile = codes.DCM.BasicApplicationConfidentialityProfile
        item.CodeValue, item.CodingSchemeDesignator, item.CodeMeaning = profile.value, profile.scheme_designator, \
            profile.meaning
        dataset.DeidentificationMethodCodeSequence = [item]
        return dataset

    def _walk(self, dataset: Any, seen: set[int]) -> None:
        """Apply the table to ``dataset`` and its items; each item once, though a writer (highdicom) may
        put the same item object in several sequences (a UID must not be replaced twice)."""
        if id(dataset) in seen:
            return
        seen.add(id(dataset))
        by_tag, groups = _profile()
        for element in list(dataset):
            tag = int(element.tag)
            if element.tag.is_private:
                continue  # removed as a whole afterwards
            action = by_tag.get(tag)
            if action is None:
                for group, elem, group_mask, elem_mask, letter in groups:
                    if (element.tag.group & group_mask) == (group & group_mask) and \
                            (element.tag.element & elem_mask) == (elem & elem_mask):
                        action = letter
                        break
            if element.VR == "SQ":
                if action == "X":
                    del dataset[element.tag]
                    continue
                if action == "Z":
                    element.value = []
                    continue
                # U* (references), D on a sequence, or a sequence the table does not name: its items
                # are de-identified with the same table.
                for item in element.value or []:
                    self._walk(item, seen)
                continue
            if action is None:
                continue
            if tag == _PATIENT_ID:
                element.value = self.patient_id(str(element.value or ""))
            elif tag == _PATIENT_NAME:  # the profile allows a dummy: the pseudonym keeps a patient's studies together
                element.value = self.patient_id(str(dataset.get("PatientID", "") or "")) if dataset.get("PatientID") \
                    else ""
            elif element.VR == "UI":
                if action in ("U", "U*", "D"):
                    element.value = self._uids(element.value)
                elif action == "Z":
                    element.value = ""
                else:
                    del dataset[element.tag]
            elif action == "X":
                self._remove(dataset, element)
            elif action == "Z":
                self._empty(element)
            else:
                self._dummy(element)

    def _uids(self, value: Any) -> Any:
        from pydicom.multival import MultiValue

        if isinstance(value, (list, MultiValue)):
            return [self.uid(v) for v in value]
        return self.uid(value)

    @staticmethod
    def _remove(dataset: Any, element: Any) -> None:
        from dicomanonymizer.simpledicomanonymizer import delete_element

        delete_element(dataset, element)  # the standard's X; dates it keeps as a dummy, as the profile allows

    @staticmethod
    def _empty(element: Any) -> None:
        from dicomanonymizer.simpledicomanonymizer import empty_element

        _per_vr(empty_element, element)

    @staticmethod
    def _dummy(element: Any) -> None:
        from dicomanonymizer.simpledicomanonymizer import replace_element

        _per_vr(replace_element, element)

    # --- medseg's own records ---------------------------------------------------------------------

    def meta(self, meta: VolumeMeta) -> VolumeMeta:
        """A copy of a Volume's source facts with UIDs replaced and everything identifying blanked."""
        return replace(
            meta,
            study_uid=self.uid(meta.study_uid), series_uid=self.uid(meta.series_uid),
            frame_of_reference_uid=self.uid(meta.frame_of_reference_uid),
            sop_instance_uids=[self.uid(u) for u in meta.sop_instance_uids],
            patient_name="", patient_id=self.patient_id(meta.patient_id) if meta.patient_id else "",
            study_description="", series_description="", study_date="",
            findings=list(meta.findings), labels=dict(meta.labels), extra=dict(meta.extra),
        )

    def volume(self, volume: Volume) -> Volume:
        """The same voxels and geometry with de-identified source facts (for label-map sidecars)."""
        copy = volume.with_array(volume.array)
        copy.meta = self.meta(volume.meta)
        return copy

    # --- the re-identification mapping ----------------------------------------------------------------

    def _fernet(self) -> Any:
        from cryptography.fernet import Fernet
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF

        derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"medseg re-identification mapping"
                       ).derive(self._key)
        return Fernet(base64.urlsafe_b64encode(derived))

    def seal(self, record: dict[str, Any]) -> str:
        """One mapping record, encrypted with the key (a line of the mapping file)."""
        return self._fernet().encrypt(json.dumps(record, sort_keys=True).encode("utf-8")).decode("ascii")

    def open_sealed(self, token: str) -> dict[str, Any]:
        from cryptography.fernet import InvalidToken

        try:
            return json.loads(self._fernet().decrypt(token.strip().encode("ascii")))
        except (InvalidToken, ValueError) as error:
            raise DeidentificationKeyError("this mapping was not written with this key (or is damaged)") from error


def _per_vr(action: Any, element: Any) -> None:
    """dicom-anonymizer's empty/dummy value for the element's VR; no value for a VR it has none for."""
    try:
        action(element)
    except NotImplementedError:
        element.value = None


def write_mapping(path: str | os.PathLike, deid: Deidentifier, records: list[dict[str, Any]]) -> Path:
    """The encrypted re-identification mapping: a header line, then one sealed record per line."""
    lines = [json.dumps({"format": _MAPPING_FORMAT, "key": deid.fingerprint})]
    lines += [deid.seal(record) for record in records]
    return atomic_write_bytes(path, ("\n".join(lines) + "\n").encode("ascii"))


def read_mapping(path: str | os.PathLike, deid: Deidentifier) -> list[dict[str, Any]]:
    """The records of a mapping file (only with the key that wrote it)."""
    path = Path(path)
    try:
        lines = [line for line in path.read_text(encoding="ascii").splitlines() if line.strip()]
        header = json.loads(lines[0]) if lines else {}
    except (OSError, ValueError, UnicodeError) as error:
        raise SaveError(f"cannot read the re-identification mapping ({error})", path=path) from error
    if header.get("format") != _MAPPING_FORMAT:
        raise MedsegError("not a medseg re-identification mapping", path=path)
    if header.get("key") != deid.fingerprint:
        raise DeidentificationKeyError("this mapping was written with another key", path=path)
    return [deid.open_sealed(line) for line in lines[1:]]


def write_deidentified_series(image: Volume, folder: str | os.PathLike, deid: Deidentifier) -> list[Path]:
    """The DICOM series ``image`` was loaded from, de-identified, as one folder (written whole or not at all).

    Pixels are unchanged; headers follow the profile with the same keyed UIDs a SEG of this image
    gets, so the SEG references these files. Blank source UIDs get the same stand-ins the SEG
    writer gives them. Files are named by their new SOP Instance UID.
    """
    import pydicom

    from medseg.io.atomic import atomic_folder
    from medseg.io.dicom_seg_write import check_can_reference, fill_blank_uids
    from medseg.io.dicom_sources import open_ref

    check_can_reference(image, folder)
    refs = list(dict.fromkeys(image.meta.source_files))
    datasets = []
    for ref in refs:
        try:
            with open_ref(ref) as handle:
                datasets.append(pydicom.dcmread(handle))
        except MedsegError:
            raise
        except Exception as error:  # the source moved or is unreadable
            raise SaveError(f"cannot read the source image to de-identify it ({error})", path=ref) from error
    fill_blank_uids(datasets, [])
    written = []
    with atomic_folder(folder) as temp:
        for dataset in datasets:
            deid.dataset(dataset)
            name = f"{dataset.SOPInstanceUID}.dcm"
            dataset.save_as(temp / name, enforce_file_format=True)
            written.append(Path(folder) / name)
    return written


def save_deidentified(label_map: Volume, image: Volume, path: str | os.PathLike, segments: list[Any] | None,
                      deid: Deidentifier) -> list[str]:
    """Save a segmentation for a research export: a label map whose sidecar names only replaced UIDs, or a
    DICOM SEG (Basic Profile) written after its de-identified source series (``<name>_ct/`` beside it),
    which it references. Returns notes for the user."""
    from medseg.io.segmentations import save_segmentation, saved_format

    path = Path(path)
    if not saved_format(path).dicom_seg:  # a label map: its sidecar keeps no patient data, only UIDs to replace
        return save_segmentation(label_map, deid.volume(image), path, segments)
    from medseg.io.dicom_seg_write import write_dicom_seg

    series = deidentified_series_folder(path)
    written = write_deidentified_series(image, series, deid)
    result = write_dicom_seg(label_map, image, path, segments, finish=deid.dataset)
    return [f"de-identified DICOM SEG with {len(result.segments)} segments; it references the de-identified "
            f"series in {series.name}/ ({len(written)} images)", *result.notes]


def deidentified_series_folder(seg_path: str | os.PathLike) -> Path:
    """Where the de-identified source series of a de-identified SEG goes: ``<name>_ct/`` beside it."""
    seg_path = Path(seg_path)
    return seg_path.with_name(seg_path.name[: -len(seg_path.suffix)] + "_ct")


USER_KEY_NAME = "deidentify.key"


def user_deidentifier() -> Deidentifier:
    """The de-identifier of this user's own key (medseg's config folder; created on first use), for saves
    from the app: the same series always gets the same replacement UIDs and pseudonym."""
    from medseg.io.pacs.servers import config_dir

    folder = config_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise DeidentificationKeyError(f"cannot create medseg's settings folder ({error.strerror})", path=folder) \
            from error
    key, _created = load_or_create_key(folder / USER_KEY_NAME)
    return Deidentifier(key)
