"""Known vulnerabilities in what medseg ships (``make audit``): pip-audit over the pinned runtime set.

The set is the closure of medseg's requirements as installed (medseg.third_party: the same
packages the bundle and the licence list hold), each pinned to its installed version (a local
label such as torch's ``+cpu`` is dropped: advisories name the public release). pip-audit asks
PyPI's vulnerability data (or OSV with ``--service osv``) for each pin.

pip-audit reports a package it could not look up as skipped, and then still says "No known
vulnerabilities found". This wrapper does not: a package that was not looked up makes the
audit incomplete, and the report says which and why (the answer of the service's address).

    .venv/bin/python installers/audit.py [--service pypi|osv] [--out build/audit]

Exit status: 0 audited, nothing found; 1 vulnerabilities found; 2 not (completely) audited.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from medseg.third_party import runtime_distributions  # noqa: E402

PROBES = {"pypi": "https://pypi.org/pypi/{name}/{version}/json", "osv": "https://api.osv.dev/v1/query"}


def pinned_requirements() -> list[str]:
    pins = []
    for dist in runtime_distributions():
        name = dist.metadata["Name"]
        if name.lower() != "medseg":
            pins.append(f"{name}=={dist.version.split('+', 1)[0]}")
    return sorted(pins, key=str.lower)


def probe(service: str, name: str, version: str) -> str:
    """What the service's address answers, for the report when lookups failed."""
    url = PROBES[service].format(name=name, version=version)
    data = json.dumps({"package": {"name": name, "ecosystem": "PyPI"}, "version": version}).encode() if service == "osv" else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=30) as answer:
            return f"{url}: HTTP {answer.status}"
    except urllib.error.HTTPError as error:
        return f"{url}: HTTP {error.code} {error.reason}"
    except (urllib.error.URLError, OSError) as error:
        return f"{url}: {getattr(error, 'reason', error)}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--service", choices=sorted(PROBES), default="pypi")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "audit")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    pins = pinned_requirements()
    requirements = args.out / "requirements-pinned.txt"
    requirements.write_text("\n".join(pins) + "\n")
    command = [sys.executable, "-m", "pip_audit", "--requirement", str(requirements), "--no-deps", "--disable-pip",
               "--vulnerability-service", args.service, "--format", "json", "--progress-spinner", "off", "--desc", "on"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    (args.out / f"pip-audit-{args.service}.json").write_text(done.stdout)
    try:
        result = json.loads(done.stdout)
    except json.JSONDecodeError:
        last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no message"
        print(f"audit: NOT AUDITED: pip-audit stopped (exit {done.returncode}) with: {last}", file=sys.stderr)
        return 2
    dependencies = result.get("dependencies", [])
    skipped = [d for d in dependencies if d.get("skip_reason")]
    vulnerable = [d for d in dependencies if d.get("vulns")]
    lines = [f"medseg audit: {len(pins)} pinned runtime packages, pip-audit {args.service} service "
             f"({requirements.relative_to(ROOT) if requirements.is_relative_to(ROOT) else requirements})"]
    for dep in vulnerable:
        for vuln in dep["vulns"]:
            fixed = ", ".join(vuln.get("fix_versions") or []) or "no fixed version"
            aliases = ", ".join(vuln.get("aliases") or [])
            lines.append(f"  VULNERABLE {dep['name']} {dep['version']}: {vuln['id']} ({aliases}); fixed in {fixed}")
            lines.append(f"      {(vuln.get('description') or '').strip().splitlines()[0][:200] if vuln.get('description') else ''}")
    if skipped:
        lines.append(f"  NOT AUDITED: {len(skipped)} of {len(dependencies)} packages could not be looked up:")
        reasons: dict[str, list[str]] = {}
        for dep in skipped:
            reason = re.sub(r":\s*\S+ \(.*\)$", "", dep["skip_reason"])
            reasons.setdefault(reason, []).append(f"{dep['name']} {dep.get('version', '')}".strip())
        for reason, names in reasons.items():
            lines.append(f"    {reason}: {', '.join(names)}")
        versions = dict(pin.split("==") for pin in pins)
        name = next((n for n in versions if re.sub(r"[-_.]+", "-", n).lower() == skipped[0]["name"]), skipped[0]["name"])
        lines.append(f"    the service's address answers: {probe(args.service, name, versions.get(name, ''))}")
    audited = len(dependencies) - len(skipped)
    lines.append(f"  audited {audited}, vulnerable {len(vulnerable)}, not audited {len(skipped)}")
    report = "\n".join(lines)
    (args.out / f"audit-report-{args.service}.txt").write_text(report + "\n")
    print(report)
    if vulnerable:
        return 1
    return 2 if skipped or not dependencies else 0


if __name__ == "__main__":
    sys.exit(main())
