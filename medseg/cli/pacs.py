"""``medseg pacs servers|echo|query|get|send``: the PACS without a window.

A server is a name from the PACS settings (the same ones the GUI edits), or given on the
command line with ``--url`` (DICOMweb) or ``--host/--port/--aet`` (DIMSE).
"""

from __future__ import annotations

import argparse
import json
import sys


def _server_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("server given on the command line (instead of a saved name)")
    group.add_argument("--url", help="DICOMweb service root, e.g. https://pacs.example.org/dicom-web")
    group.add_argument("--host", help="DIMSE host")
    group.add_argument("--port", type=int, default=104, help="DIMSE port (default 104)")
    group.add_argument("--aet", help="the PACS's (called) AE title")
    group.add_argument("--our-aet", default=None, help="our AE title (default MEDSEG)")
    group.add_argument("--storage-port", type=int, default=None, help="our storage SCP port for C-MOVE (default 11112)")
    group.add_argument("--tls", action="store_true", help="DIMSE over TLS")
    group.add_argument("--ca-file", help="PEM file of the CA that signed the server's certificate")
    group.add_argument("--user", help="HTTP basic user; the password comes from $MEDSEG_PACS_PASSWORD or the keyring")
    group.add_argument("--bearer", action="store_true", help="HTTP bearer token from $MEDSEG_PACS_TOKEN or the keyring")
    group.add_argument("--timeout", type=float, default=None, help="seconds to wait for the server (default 20)")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("pacs", help="query, retrieve from and send to a PACS (DICOMweb or DIMSE)",
                                   description="Talk to a PACS. SERVER is a name from the PACS settings "
                                               "(`medseg pacs servers`), or give --url / --host --port --aet.")
    commands = parser.add_subparsers(dest="pacs_command", metavar="ACTION", required=True)

    servers = commands.add_parser("servers", help="list, add or remove saved PACS servers (no secrets are shown)")
    servers.add_argument("--add", metavar="NAME", help="save the server given by the options under NAME")
    servers.add_argument("--remove", metavar="NAME", help="delete a saved server (and its keyring secret)")
    servers.add_argument("--retrieve", choices=["get", "move"], default=None, help="DIMSE retrieval for --add")
    servers.add_argument("--store-secret", action="store_true",
                         help="with --add: read the password/token from stdin and keep it in the OS keyring")
    servers.add_argument("--json", action="store_true", help="machine-readable output")
    _server_options(servers)
    servers.set_defaults(func=run_servers)

    echo = commands.add_parser("echo", help="test the connection (C-ECHO or a QIDO-RS request)")
    echo.add_argument("server", nargs="?", help="saved server name")
    _server_options(echo)
    echo.set_defaults(func=run_echo)

    query = commands.add_parser("query", help="find studies (QIDO-RS or C-FIND)")
    query.add_argument("server", nargs="?", help="saved server name")
    query.add_argument("--patient-id", default="")
    query.add_argument("--name", default="", help="patient name; * is a wildcard")
    query.add_argument("--birth-date", default="", help="YYYYMMDD")
    query.add_argument("--date-from", default="", help="study date from, YYYYMMDD")
    query.add_argument("--date-to", default="", help="study date to, YYYYMMDD")
    query.add_argument("--modality", default="")
    query.add_argument("--accession", default="")
    query.add_argument("--description", default="")
    query.add_argument("--limit", type=int, default=50, help="studies per page (default 50)")
    query.add_argument("--offset", type=int, default=0, help="skip this many studies (next page)")
    query.add_argument("--series", action="store_true", help="also list each study's series")
    query.add_argument("--json", action="store_true", help="machine-readable output")
    _server_options(query)
    query.set_defaults(func=run_query)

    get = commands.add_parser("get", help="retrieve a study or series into a folder (resumes an interrupted one)")
    get.add_argument("items", nargs="+", metavar="SERVER STUDY_UID",
                     help="saved server name (unless --url/--host is given) and the Study Instance UID")
    get.add_argument("--series", action="append", metavar="UID", help="only this series (repeatable)")
    get.add_argument("-o", "--out", required=True, help="folder: files land in OUT/<study>/<series>/")
    get.add_argument("--method", choices=["wado", "get", "move"], help="default: WADO-RS, or the server's DIMSE setting")
    get.add_argument("--quiet", action="store_true", help="no progress output")
    _server_options(get)
    get.set_defaults(func=run_get)

    send = commands.add_parser("send", help="send DICOM files, e.g. a DICOM SEG (STOW-RS or C-STORE)")
    send.add_argument("items", nargs="+", metavar="SERVER FILES", help="saved server name (unless --url/--host) and files")
    send.add_argument("--json", action="store_true", help="machine-readable output")
    _server_options(send)
    send.set_defaults(func=run_send)


def _options(args: argparse.Namespace):
    from medseg.workflows.pacs import ServerOptions

    return ServerOptions(url=args.url, host=args.host, port=args.port, aet=args.aet, our_aet=args.our_aet,
                         storage_port=args.storage_port, retrieve=getattr(args, "retrieve", None), tls=args.tls,
                         user=args.user, bearer=args.bearer, ca_file=args.ca_file, timeout_s=args.timeout)


def _server(args: argparse.Namespace, name: str | None):
    from medseg.workflows.pacs import find_server

    return find_server(name, _options(args))


def _split(args: argparse.Namespace) -> tuple[str | None, list[str]]:
    if args.url or args.host:
        return None, list(args.items)
    return args.items[0], list(args.items[1:])


def run_servers(args: argparse.Namespace) -> int:
    from medseg.workflows.pacs import pacs_error, remove_server, save_server, saved_servers, server_from_options

    if args.add:
        if not (args.url or args.host):
            raise pacs_error("--add needs --url or --host/--aet")
        server = server_from_options(_options(args), name=args.add)
        where = save_server(server, sys.stdin.readline().rstrip("\n") if args.store_secret else None)
        print(f"saved {server.describe()} in {where}")
        return 0
    if args.remove:
        remove_server(args.remove)
        print(f"removed {args.remove}")
        return 0
    servers, where = saved_servers()
    if args.json:
        print(json.dumps([s.to_json() for s in servers], indent=1))
    elif not servers:
        print(f"no PACS servers saved ({where}); add one with `medseg pacs servers --add NAME --url ...`")
    for server in ([] if args.json else servers):
        print(server.describe())
    return 0


def run_echo(args: argparse.Namespace) -> int:
    from medseg.workflows.pacs import echo_server

    print(echo_server(_server(args, args.server)))
    return 0


def run_query(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from medseg.workflows.pacs import find_studies, query_filters

    server = _server(args, args.server)
    filters = query_filters(patient_id=args.patient_id, patient_name=args.name, birth_date=args.birth_date,
                            date_from=args.date_from, date_to=args.date_to, modality=args.modality,
                            accession_number=args.accession, description=args.description)
    found = find_studies(server, filters, limit=args.limit, offset=args.offset, with_series=args.series)
    page, series = found.page, found.series
    if args.json:
        print(json.dumps({"server": server.name if args.server else None, "offset": page.offset, "more": page.more,
                          "studies": [{**asdict(s), "series": [asdict(x) for x in series.get(s.study_uid, [])]}
                                      for s in page.studies]}, indent=1))
        return 0
    for study in page.studies:
        print(f"{study.study_date or '--------'}  {study.patient_id:<16} {study.patient_name:<24} "
              f"{'/'.join(study.modalities):<6} {study.instance_count or '?':>5} img  {study.description}  "
              f"{study.study_uid}")
        for item in series.get(study.study_uid, []):
            print(f"    series {item.number or '-':>4} {item.modality:<4} {item.instance_count or '?':>5} img  "
                  f"{item.description}  {item.series_uid}")
    if page.more:
        print(f"more studies: --offset {page.offset + len(page.studies)}", file=sys.stderr)
    if not page.studies:
        print("no studies match", file=sys.stderr)
    return 0


def run_get(args: argparse.Namespace) -> int:
    from medseg.cli._console import progress_printer
    from medseg.workflows.pacs import pacs_error, retrieve_study

    name, rest = _split(args)
    if len(rest) != 1:
        raise pacs_error("give exactly one Study Instance UID", hint="medseg pacs get SERVER STUDY_UID -o DIR")
    server = _server(args, name)
    for result in retrieve_study(server, rest[0], args.out, args.series, method=args.method,
                                 progress=None if args.quiet else progress_printer()):
        rate = f", {result.nbytes / 1e6 / result.seconds:.1f} MB/s" if result.received and result.seconds else ""
        print(f"{result.folder}: {result.expected} instances ({result.received} retrieved, "
              f"{result.already_cached} already here{rate})")
    return 0


def run_send(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from medseg.workflows.pacs import send

    name, files = _split(args)
    results = send(lambda: _server(args, name), files)
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=1))
    else:
        for result in results:
            print(f"{'ok    ' if result.ok else 'FAILED'} {result.status:<14} {result.path}")
    return 0 if all(r.ok for r in results) else 1
