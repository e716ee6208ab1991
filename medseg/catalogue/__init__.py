"""Models medseg knows and the ones installed here: the catalogue, downloads, packs and imports.

Qt-free, below the use-case tier (``medseg.workflows``) and above ``medseg.model``, whose safe
nnU-Net import turns every downloaded checkpoint into a medseg package (nothing is unpickled).

- :mod:`.entries`   the catalogue file shipped in ``resources/models/catalogue.json``
- :mod:`.folders`   where models live (per user, system-wide read-only, ``$MEDSEG_MODELS``)
- :mod:`.record`    ``installed.json``: what was installed, from where, with which hashes
- :mod:`.download`  resumable, verified HTTP downloads (proxy from the environment)
- :mod:`.unpack`    zip extraction that refuses paths outside the target, links and bombs
- :mod:`.convert`   nnU-Net result folders -> medseg packages, per catalogue configuration
- :mod:`.install`   one atomic install from downloads, a pack or a folder; verify; remove
- :mod:`.licence_key` TotalSegmentator's licensed tasks: the user's key, its download, where it is kept
- :mod:`.integrity` missing or damaged weights, refused at install/import and at open
- :mod:`.packs`     one-file packs for air-gapped machines
- :mod:`.discover`  nnU-Net result folders, TotalSegmentator homes and zips a user already has
"""

from medseg.catalogue.entries import Catalogue, ModelEntry, load_catalogue
from medseg.catalogue.folders import installed_model_path, installed_models, resolve_reference

__all__ = ["Catalogue", "ModelEntry", "load_catalogue", "installed_model_path", "installed_models",
           "resolve_reference"]
