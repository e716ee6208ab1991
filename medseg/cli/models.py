"""``medseg models list | info ID | install ID|FILE | import PATH | verify [ID] | remove ID | pack ID -o FILE``.

The model catalogue on the command line (medseg.catalogue): what is known, what is installed,
installing from the publisher (resumable, verified), from a pack or a zip without a network,
importing the nnU-Net and TotalSegmentator folders a user already has. Nothing is sent anywhere
but the requests for the files being installed.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from medseg.cli._console import progress_printer


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "models", help="list, install, import, verify, remove and pack models (the catalogue)",
        description="The models medseg knows (TotalSegmentator's CT tasks, the built-in starter) and the ones "
                    "installed here. Models live in $MEDSEG_MODELS (default: medseg's data folder/models), then in "
                    "the read-only system-wide folder ($MEDSEG_SYSTEM_MODELS). docs/models.md has the details.")
    commands = parser.add_subparsers(dest="models_command", metavar="ACTION", required=True)

    listing = commands.add_parser("list", help="every known and installed model, with size, licence, checksum")
    listing.add_argument("--installed", action="store_true", help="only the installed ones")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(func=run_list)

    info = commands.add_parser("info", help="one model: structures, configurations, files, licence, citation")
    info.add_argument("id")
    info.add_argument("--json", action="store_true", help="print JSON")
    info.set_defaults(func=run_info)

    install = commands.add_parser(
        "install", help="download and install a catalogue model, or install a pack or a publisher's zip",
        description="ID: download the model's files from its publisher (resumed when interrupted, verified, "
                    "converted without running any code from them) and install it atomically. FILE: a pack made "
                    "by `medseg models pack` (no network needed), or a zip as the publisher sends it (use --id "
                    "for licensed models).")
    install.add_argument("source", help="catalogue id (e.g. totalsegmentator/total) or a pack/zip file")
    install.add_argument("--id", dest="model_id", help="with a zip: the catalogue id it is (licensed models)")
    install.add_argument("--configuration", action="append", dest="configurations", metavar="NAME",
                         help="install only this configuration (repeatable; default: all), e.g. 3mm")
    install.add_argument("--accept-licence", action="store_true",
                         help="accept the licence shown by `medseg models info` without being asked")
    install.add_argument("--licence-key", metavar="KEY",
                         help="your TotalSegmentator licence key, for its licensed tasks (e.g. "
                              "totalsegmentator/tissue_types); '-' reads it from the standard input. It is sent "
                              "only to TotalSegmentator's licence server and kept with the model, readable by you only")
    install.set_defaults(func=run_install)

    imports = commands.add_parser(
        "import", help="register models from an nnU-Net result folder, a TotalSegmentator folder or zip, or an "
                       "nnInteractive model folder",
        description="PATH: an nnU-Net v2 result folder, a TotalSegmentator home (~/.totalsegmentator) or weights "
                    "folder, a zip as TotalSegmentator publishes it, or an nnInteractive model folder "
                    "(nnInteractive_v1.0 is nninteractive/v1.0; another checkpoint in its layout local/<folder>). "
                    "Every task found is registered under its "
                    "catalogue id; networks the catalogue does not know under local/<dataset>. Without PATH, "
                    "TotalSegmentator's own weights folder ($TOTALSEG_WEIGHTS_PATH, $TOTALSEG_HOME_DIR, "
                    "~/.totalsegmentator) is used.")
    imports.add_argument("path", nargs="?", help="folder or zip (default: TotalSegmentator's weights folder)")
    imports.add_argument("--id", dest="model_id", help="import only this catalogue model")
    imports.add_argument("--accept-licence", action="store_true", help="accept the licences of licensed models found")
    imports.set_defaults(func=run_import)

    check = commands.add_parser("verify", help="check installed files against the hashes recorded at install")
    check.add_argument("id", nargs="?", help="one model (default: every installed model; 'starter' with --measure: the "
                                             "built-in starter's engines)")
    check.add_argument("--measure", action="store_true",
                       help="also measure the CPU engines (PyTorch, ONNX Runtime, OpenVINO) on each model again, "
                            "on a tile of a synthetic CT, and keep the fastest with equal labels (done at install; "
                            "redo it after changing the computer or the engines)")
    check.add_argument("--tier", choices=("int8", "bf16"),
                       help="build and verify this faster tier of MODEL here: offered to `medseg segment --precision` "
                            "only if its labels equal the exact float32 path's on >= 99.9 %% of a reference series' "
                            "voxels and every structure of >= 1000 voxels keeps Dice >= 0.99")
    check.add_argument("--reference", metavar="SERIES",
                       help="with --tier: the series to verify on and calibrate with (default: medseg's synthetic CT "
                            "phantom)")
    check.set_defaults(func=run_verify)

    remove = commands.add_parser("remove", help="uninstall a model from your models folder")
    remove.add_argument("id")
    remove.set_defaults(func=run_remove)

    packer = commands.add_parser("pack", help="write an installed model into one file for an offline machine")
    packer.add_argument("id")
    packer.add_argument("-o", "--output", required=True, help="the pack to write (e.g. total.medsegpack)")
    packer.set_defaults(func=run_pack)


# --- list / info ------------------------------------------------------------------------------------
def _size(entry) -> str:
    if entry.builtin:
        return "built in"
    size = entry.size
    return f"{size / 2**20:.0f} MB" if size is not None else "size unknown"


def _checksum(entry) -> str:
    if entry.builtin:
        return "built in"
    return "SHA-256 published" if entry.checksums_published else "no published checksum"


def run_list(args: argparse.Namespace) -> int:
    from medseg.catalogue import load_catalogue
    from medseg.catalogue.folders import installed_models

    catalogue = load_catalogue()
    installed = {r.id: r for r in installed_models()}
    rows: list[dict[str, Any]] = []
    for entry in catalogue:
        record = installed.get(entry.id)
        state = "built in" if entry.builtin else ("installed" if record else "not installed")
        rows.append({"id": entry.id, "state": state, "version": record.version if record else entry.version,
                     "structures": len(entry.structures), "size": entry.size, "licence": entry.licence.spdx,
                     "commercial_use": entry.licence.commercial_use,
                     "acceptance_required": entry.licence.acceptance_required,
                     "checksum": _checksum(entry), "runs": entry.support, "runs_note": entry.support_note,
                     "title": entry.title, "system_wide": bool(record and record.read_only)})
    for record in installed.values():
        if record.id not in catalogue:
            rows.append({"id": record.id, "state": "installed", "version": record.version,
                         "structures": len(record.entry.get("structures", [])), "size": None,
                         "licence": (record.entry.get("licence") or {}).get("spdx", "?"), "commercial_use": None,
                         "acceptance_required": False, "checksum": "hash recorded at import", "runs": "networks",
                         "runs_note": "", "title": record.entry.get("title", record.id), "system_wide": record.read_only})
    if args.installed:
        rows = [r for r in rows if r["state"] != "not installed"]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    width = max(len(r["id"]) for r in rows) if rows else 10
    for row in rows:
        listed = catalogue.entries.get(row["id"])
        size = _size(listed) if listed is not None else ""
        licence = row["licence"] + (" (licence must be accepted)" if row["acceptance_required"] else "")
        where = " [system-wide]" if row["system_wide"] else ""
        print(f"{row['id']:<{width}}  {row['state']:<13} {row['structures']:>3} structures  {size:<12}  "
              f"{licence}; {row['checksum']}; runs: {row['runs']}{where}")
        if row["runs"] not in ("native", "exact") and row["runs_note"]:  # why not (yet) as its publisher runs it
            print(f"{'':<{width}}  ({row['runs_note']})")
    return 0


def run_info(args: argparse.Namespace) -> int:
    from medseg.catalogue import load_catalogue
    from medseg.catalogue.entries import SUPPORT_STATES, parse_entry
    from medseg.catalogue.folders import find_installed
    from medseg.catalogue.licence_key import key_summary, needs_key, where_to_get_one

    catalogue = load_catalogue()
    record = find_installed(args.id)
    entry = catalogue.entries.get(args.id) or (parse_entry(record.entry) if record else catalogue.get(args.id))
    if args.json:
        print(json.dumps({"entry": entry.raw, "installed": record.to_json() if record else None,
                          "folder": str(record.version_folder) if record else None}, indent=1))
        return 0
    print(f"{entry.id}: {entry.title}")
    print(f"  publisher {entry.publisher}, version {entry.version}, modality {entry.modality}")
    if entry.description:
        print(f"  {entry.description}")
    print(f"  medseg runs it: {entry.support} ({SUPPORT_STATES[entry.support]})"
          + (f"; {entry.support_note}" if entry.support_note else ""))
    if record:
        print(f"  installed: version {record.version} at {record.version_folder}"
              f"{' (system-wide, read-only)' if record.read_only else ''}; configurations {', '.join(record.configurations)}")
    else:
        print("  not installed" + ("" if entry.builtin else f" (`medseg models install {entry.id}`)"))
    print("  configurations:")
    for configuration in entry.configurations:
        spacing = " x ".join(f"{s:g}" for s in configuration.spacing_mm) + " mm" if configuration.spacing_mm \
            else "the series' own spacing"
        networks = f", networks {', '.join(str(d) for d in configuration.datasets)}" if configuration.datasets else ""
        print(f"    {configuration.name}: {spacing}{networks}")
    if entry.files:
        print(f"  files ({_size(entry)}, {_checksum(entry)}):")
        for weight in entry.files:
            where = weight.urls[0] if weight.urls else (
                "(from TotalSegmentator's licence server, with your licence key)" if needs_key(entry)
                else "(from the publisher, on request)")
            print(f"    {weight.name}  {where}"
                  + (f"  sha256 {weight.sha256}" if weight.sha256 else ""))
    licence = entry.licence
    print(f"  licence: {licence.spdx} {licence.url}; commercial use: {'yes' if licence.commercial_use else 'no'}"
          + ("; must be accepted before installing" if licence.acceptance_required else ""))
    print(f"    {licence.terms}")
    if record and key_summary(record):
        print(f"  {key_summary(record)}")
    elif needs_key(entry):
        print(f"  installs with your TotalSegmentator licence key (`medseg models install {entry.id} "
              f"--licence-key KEY`); {where_to_get_one()}")
    if entry.citation:
        print(f"  cite: {entry.citation}")
    print(f"  structures ({len(entry.structures)}):")
    for group, structures in entry.groups().items():
        print(f"    {group}: " + ", ".join(f"{s.value} {s.name}" for s in structures))
    return 0


# --- install / import -------------------------------------------------------------------------------
def _prompt(entry) -> bool:
    """Show the licence and ask (only on a terminal; elsewhere --accept-licence says it)."""
    print(f"{entry.id} is licensed ({entry.licence.spdx}, {entry.licence.url}):\n  {entry.licence.terms}",
          file=sys.stderr)
    if not sys.stdin.isatty():
        return False
    return input("Accept this licence? [y/N] ").strip().lower() in ("y", "yes")


def run_install(args: argparse.Namespace) -> int:
    from medseg.catalogue.folders import is_model_id
    from medseg.workflows.model_install import InstallRequest, install_model

    accept = True if args.accept_licence else _prompt
    key = args.licence_key
    if key == "-" and is_model_id(args.source):  # kept out of the shell's history and of `ps`
        key = sys.stdin.readline().strip()
    request = InstallRequest(args.source, configurations=args.configurations, licence_key=key,
                             model_id=args.model_id)
    _print_installed(install_model(request, accept, progress_printer()).installed)
    return 0


def run_import(args: argparse.Namespace) -> int:
    from medseg.workflows.model_install import folders_to_import, import_models

    accept = True if args.accept_licence else _prompt
    for path in folders_to_import(args.path):
        _print_installed(import_models(path, accept, args.model_id, progress_printer()).installed)
    return 0


def _print_installed(records) -> None:
    for record in records:
        runs = f"opens {record.run_path()}" if record.run else "its networks are stored for a pipeline medseg lacks yet"
        print(f"installed {record.id} {record.version} ({', '.join(record.configurations)}): {runs}")


# --- verify / remove / pack ---------------------------------------------------------------------------
def run_verify(args: argparse.Namespace) -> int:
    from medseg.catalogue.install import verify

    if args.tier:
        return _verify_tier(args)
    if args.id == "starter" and args.measure:  # built in: no files to check, its engines to measure
        _measure([], starter=True)
        return 0
    results = verify(args.id)
    bad = 0
    for result in results:
        if result.ok:
            print(f"{result.id}: ok ({result.folder})")
            continue
        bad += 1
        print(f"{result.id}: CHANGED since it was installed ({result.folder})")
        for label, names in (("changed", result.changed), ("missing", result.missing), ("not installed by medseg", result.extra)):
            for name in names:
                print(f"  {label}: {name}")
    if not results:
        print("no models installed")
    if args.measure:
        _measure([r for r in results if r.ok], starter=args.id is None)
    return 1 if bad else 0


def _verify_tier(args: argparse.Namespace) -> int:
    """Build and gate a faster tier; 0 when every configuration's is offered, 1 when one failed its gate."""
    from medseg.workflows.precision import verify_tier

    records = verify_tier(args.id or "starter", args.tier, args.reference, progress=progress_printer())
    for record in records:
        print(f"{args.id or 'starter'} ({record.configuration}): {record.describe()}")
    return 0 if all(record.offered for record in records) else 1


def _measure(results, starter: bool) -> None:
    """The engines of the verified models (and the built-in starter's), measured again."""
    from medseg.workflows.model_install import measure_engines

    for line in measure_engines([result.id for result in results], starter, progress_printer):
        print(line)


def run_remove(args: argparse.Namespace) -> int:
    from medseg.workflows.model_install import remove_model

    print(f"removed {args.id} ({remove_model(args.id)})")
    return 0


def run_pack(args: argparse.Namespace) -> int:
    from medseg.catalogue.packs import pack

    out = pack(args.id, args.output, progress=progress_printer())
    print(f"packed {args.id} into {out} ({out.stat().st_size / 2**20:.1f} MB)")
    return 0
