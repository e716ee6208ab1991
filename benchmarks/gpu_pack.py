"""Pack what a GPU machine lacks into build/gpu-check/, and set it up there (issue #27).

The GPU machine gets this working tree plus at most 64 MiB of carried folders and has no
internet: it has torch, numpy, scipy, scikit-image, safetensors, onnxruntime, timm, einops
and pandas, but not SimpleITK, imagecodecs, pydicom or nnU-Net. ``pack`` (run here) writes

    build/gpu-check/site/   pure-Python peers copied from .venv (nnunetv2 and what its inference imports)
    build/gpu-check/stubs/  import-only stand-ins for compiled packages the numpy paths never call
                            (SimpleITK, imagecodecs, blosc2, cc3d): importing works, calling raises
    build/gpu-check/data/   the CTs as .npz (array + geometry), the starter's CPU labels of lung1

and ``bootstrap`` (there) puts them on sys.path and maps ``medseg.resources`` onto
``resources/`` as an installed medseg has it. ``block_missing_packages`` makes a dry run here
refuse every import the GPU machine could not satisfy, so the dry run proves the real one.

    .venv/bin/python benchmarks/gpu_pack.py       # then: du -sh build/gpu-check
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.util
import os
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACK = REPO / "build" / "gpu-check"
SHARED = Path(os.environ.get("MEDSEG_SHARED_DATA", REPO.parent / "shared" / "data"))
# pure-Python packages nnU-Net v2's predictor imports (its readers import nibabel, its utilities batchgenerators)
PEERS = ("nnunetv2", "dynamic_network_architectures", "acvl_utils", "batchgenerators", "batchgeneratorsv2",
         "nibabel", "future", "past", "linecache2", "traceback2", "unittest2", "yacs", "pydicom", "graphviz")
STUBS = ("SimpleITK", "imagecodecs", "blosc2", "cc3d")
# what the GPU machine has (and what those bring with them)
GPU_MACHINE = {"torch", "torchgen", "functorch", "numpy", "scipy", "skimage", "safetensors", "onnxruntime", "timm",
               "einops", "pandas", "sympy", "mpmath", "networkx", "jinja2", "markupsafe", "filelock", "fsspec",
               "typing_extensions", "triton", "nvidia", "setuptools", "pkg_resources", "_distutils_hack", "packaging",
               "imageio", "tifffile", "lazy_loader", "PIL", "dateutil", "pytz", "tzdata", "six", "coloredlogs",
               "humanfriendly", "flatbuffers", "google", "torchvision", "huggingface_hub", "yaml", "tqdm", "requests",
               "urllib3", "charset_normalizer", "idna", "certifi", "psutil", "opt_einsum", "optree", "cuda"}
STUB_SOURCE = '''"""Import-only stand-in for {name} on the GPU machine (benchmarks/gpu_pack.py): calling it raises."""


def _missing(*args, **kwargs):
    raise RuntimeError("{name} is not installed on this machine (a stand-in from benchmarks/gpu_pack.py)")


class _Anything(type):
    def __getattr__(cls, attribute):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return _Anything(attribute, (), {{"__init__": _missing, "__call__": _missing}})


def __getattr__(attribute):
    if attribute.startswith("__"):
        raise AttributeError(attribute)
    return _Anything(attribute, (), {{"__init__": _missing, "__call__": _missing}})
'''
# The 512 x 512 x N CT of every GPU figure: lung1 (real pixels) tiled along z on a 0.78 x 0.78 x 1.5 mm grid.
CT_SPACING_XYZ = (0.78, 0.78, 1.5)


def _site_packages() -> Path:
    import sysconfig

    return Path(sysconfig.get_paths()["purelib"])


def _copy_tree(source: Path, target: Path) -> None:
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "tests", "test_files", "testing",
                                                                  "*.so", "*.pyc"))


def save_volume(path: Path, volume, **extra) -> None:
    import numpy as np

    np.savez_compressed(path, array=volume.array, spacing_mm=np.asarray(volume.spacing_mm),
                        origin_mm=np.asarray(volume.origin_mm), direction=np.asarray(volume.direction), **extra)


def load_volume(path: Path):
    import numpy as np

    from medseg.core.volume import Volume

    data = np.load(path)
    return Volume(data["array"], tuple(float(s) for s in data["spacing_mm"]),
                  tuple(float(o) for o in data["origin_mm"]), data["direction"])


def pack(out: Path = PACK, reference: bool = True) -> Path:
    from medseg.io import read_image

    if out.exists():
        shutil.rmtree(out)
    (out / "site").mkdir(parents=True)
    site = _site_packages()
    for name in PEERS:
        if (site / name).is_dir():
            _copy_tree(site / name, out / "site" / name)
        elif (site / f"{name}.py").is_file():
            shutil.copy(site / f"{name}.py", out / "site" / f"{name}.py")
    for name in STUBS:
        (out / "stubs" / name).mkdir(parents=True)
        (out / "stubs" / name / "__init__.py").write_text(STUB_SOURCE.format(name=name))
    (out / "data").mkdir()
    save_volume(out / "data" / "lung1.npz", read_image(SHARED / "ct" / "pyradiomics_lung1" / "lung1_image.nrrd"))
    save_volume(out / "data" / "ct_sm.npz", read_image(SHARED / "ct" / "totalsegmentator" / "example_ct_sm.nii.gz"))
    if reference:  # the shipped starter's labels of lung1 on this CPU: the GPU's are compared with them
        import numpy as np

        from medseg.model.infer import segment
        from medseg.workflows.models import open_model

        lung = read_image(SHARED / "ct" / "pyradiomics_lung1" / "lung1_image.nrrd")
        labels = segment(lung, open_model(None).package, device="cpu").label_map.array
        np.savez_compressed(out / "data" / "starter_lung1_cpu.npz", labels=labels)
    return out


def size_mib(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


class _Refuse(importlib.abc.MetaPathFinder):
    """Refuse top-level imports the GPU machine could not satisfy (a dry run here proves the real run)."""

    def __init__(self, allowed_roots: list[Path]) -> None:
        self.allowed_roots = [str(r) for r in allowed_roots]
        self.site = str(_site_packages())

    def find_spec(self, name, path=None, target=None):
        if "." in name or name in GPU_MACHINE or name in sys.builtin_module_names:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        origin = spec.origin or (list(spec.submodule_search_locations or [""])[0])
        if origin.startswith(self.site) and not any(origin.startswith(r) for r in self.allowed_roots):
            raise ModuleNotFoundError(f"{name} is not on the GPU machine (a dry run refuses it)", name=name)
        return None


def block_missing_packages(pack_dir: Path = PACK) -> None:
    sys.meta_path.insert(0, _Refuse([pack_dir, REPO]))


def bootstrap(pack_dir: Path = PACK) -> None:
    """On the GPU machine (and in a dry run): the packed peers and stand-ins, and medseg.resources."""
    for sub in ("stubs", "site"):
        sys.path.insert(0, str(pack_dir / sub))
    sys.path.insert(0, str(REPO / "tests" / "model"))  # nnunet_fixture: nnU-Net result folders from nnunetv2's code
    sys.path.insert(0, str(REPO))
    if importlib.util.find_spec("medseg.resources") is None:
        spec = importlib.util.spec_from_file_location("medseg.resources", REPO / "resources" / "__init__.py",
                                                      submodule_search_locations=[str(REPO / "resources")])
        module = importlib.util.module_from_spec(spec)
        sys.modules["medseg.resources"] = module
        spec.loader.exec_module(module)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=PACK)
    parser.add_argument("--no-reference", action="store_true", help="skip the starter's CPU labels of lung1")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    folder = pack(args.out, not args.no_reference)
    size = size_mib(folder)
    print(f"{folder}: {size:.1f} MiB (the working tree, about 10 MiB, travels too: 64 MiB in all)")
    return 0 if size < 50 else 1


if __name__ == "__main__":
    sys.exit(main())
