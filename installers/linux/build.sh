#!/usr/bin/env bash
# Build the Linux installers from the current checkout: the one-folder bundle (PyInstaller,
# installers/medseg.spec), a .tar.gz of it, and a .deb (dpkg-deb) that installs it in
# /opt/medseg with a `medseg` command, a desktop entry, an icon and "Open with" for DICOM.
#
#   installers/linux/build.sh            (what `make installer` runs; needs the .venv with '.[installer]')
#
# Outputs: dist/medseg/ (the bundle), dist/medseg-<version>-linux-<arch>.tar.gz,
# dist/medseg_<version>_<debarch>.deb, the bundle's CycloneDX SBOM and licence list
# (dist/medseg-<version>-linux-<arch>.cdx.json, .licences.txt); build/ holds PyInstaller's work files.
# The build fails when the SBOM finds a component whose licence installers/licences.py refuses.
# Timings and sizes are printed at the end and written to build/installer/build-report.json.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
PY="${PY:-$ROOT/.venv/bin/python}"
HERE="installers/linux"
DIST="$ROOT/dist"
WORK="$ROOT/build/installer"
mkdir -p "$DIST" "$WORK"

"$PY" -c "import PyInstaller" 2>/dev/null || {
  echo "build.sh: PyInstaller is not installed in $PY; run 'make installer' (installs '.[installer]')" >&2; exit 1; }
VERSION="$("$PY" -c 'import medseg; print(medseg.__version__)')"
ARCH="$(uname -m)"
DEBARCH="$(dpkg --print-architecture 2>/dev/null || echo amd64)"
export MEDSEG_VARIANT="${MEDSEG_VARIANT:-cpu}"

now() { date +%s.%N; }
seconds() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

# --- 1. the bundle -------------------------------------------------------------------------
start=$(now)
"$PY" -m PyInstaller --noconfirm --log-level WARN --distpath "$DIST" --workpath "$ROOT/build/pyinstaller" \
  installers/medseg.spec
bundle_s=$(seconds "$start" "$(now)")
BUNDLE="$DIST/medseg"
test -x "$BUNDLE/medseg" || { echo "build.sh: no executable at $BUNDLE/medseg" >&2; exit 1; }
# The torch wheel's own libraries ship with their symbol tables (libtorch_cpu.so 434 -> 345 MB
# without); the dynamic symbols stay. Other wheels' libraries are left as they are (auditwheel
# rewrote them with patchelf, which strip can break).
for lib in "$BUNDLE"/_internal/torch/lib/lib{torch_cpu,torch_python,torch,c10,shm,torch_global_deps}.so; do
  if test -f "$lib"; then strip --strip-unneeded "$lib"; fi
done

# --- 1b. SBOM, licence list (into the bundle too: Help > About shows it) and the licence gate ---
SBOM="$DIST/medseg-$VERSION-linux-$ARCH.cdx.json"
start=$(now)
"$PY" installers/sbom.py --bundle "$BUNDLE" --workpath "$ROOT/build/pyinstaller/medseg" --sbom "$SBOM"
sbom_s=$(seconds "$start" "$(now)")

# --- 2. the tarball ------------------------------------------------------------------------
TARBALL="$DIST/medseg-$VERSION-linux-$ARCH.tar.gz"
start=$(now)
GZIP_CMD=gzip; command -v pigz >/dev/null && GZIP_CMD=pigz
tar -C "$DIST" -cf - medseg | $GZIP_CMD -6 > "$TARBALL.part"
mv "$TARBALL.part" "$TARBALL"
tar_s=$(seconds "$start" "$(now)")

# --- 3. the .deb ---------------------------------------------------------------------------
start=$(now)
DEBROOT="$WORK/deb"
rm -rf "$DEBROOT"
mkdir -p "$DEBROOT/DEBIAN" "$DEBROOT/opt" "$DEBROOT/usr/bin" "$DEBROOT/usr/share/applications" \
  "$DEBROOT/usr/share/icons/hicolor/scalable/apps" "$DEBROOT/usr/share/icons/hicolor/256x256/apps" \
  "$DEBROOT/usr/share/mime/packages" "$DEBROOT/usr/share/doc/medseg"
cp -al "$BUNDLE" "$DEBROOT/opt/medseg" 2>/dev/null || cp -a "$BUNDLE" "$DEBROOT/opt/medseg"
install -m 0755 "$HERE/medseg.sh" "$DEBROOT/usr/bin/medseg"
install -m 0644 "$HERE/medseg.desktop" "$DEBROOT/usr/share/applications/medseg.desktop"
install -m 0644 "$HERE/medseg-mime.xml" "$DEBROOT/usr/share/mime/packages/medseg.xml"
install -m 0644 resources/icons/medseg.svg "$DEBROOT/usr/share/icons/hicolor/scalable/apps/medseg.svg"
install -m 0644 resources/icons/medseg-256.png "$DEBROOT/usr/share/icons/hicolor/256x256/apps/medseg.png"
install -m 0644 "$HERE/copyright" "$DEBROOT/usr/share/doc/medseg/copyright"
install -m 0644 "$SBOM" "$DEBROOT/usr/share/doc/medseg/sbom.cdx.json"
# Depends: the system libraries the bundled Qt loads (installers/linux/depends.txt).
DEPENDS="$(grep -v '^\s*#' "$HERE/depends.txt" | sed '/^\s*$/d' | paste -sd, - | sed 's/,/, /g')"
INSTALLED_KB="$(du -sk --apparent-size "$DEBROOT" | cut -f1)"
sed -e "s/@VERSION@/$VERSION/" -e "s/@ARCH@/$DEBARCH/" -e "s/@DEPENDS@/$DEPENDS/" \
    -e "s/@INSTALLED_KB@/$INSTALLED_KB/" "$HERE/control.in" > "$DEBROOT/DEBIAN/control"
DEB="$DIST/medseg_${VERSION}_${DEBARCH}.deb"
# zstd -12: on libtorch_cpu.so 22 % smaller than gzip -6 in the same time (83 vs 107 MB, 58 vs
# 65 s here); xz -6 took over 15 minutes for a fifth of the package on this 2-core machine.
# dpkg reads zstd since 1.21.18: Debian 12, Ubuntu 22.04 and newer (the targets, glibc >= 2.34).
# DEB_COMPRESSION=gzip DEB_LEVEL=6 for older dpkg.
DEB_COMPRESSION="${DEB_COMPRESSION:-zstd}"
DEB_LEVEL="${DEB_LEVEL:-12}"
dpkg-deb --root-owner-group -Z"$DEB_COMPRESSION" -z"$DEB_LEVEL" --threads-max="$(nproc)" --build "$DEBROOT" "$DEB" >/dev/null
rm -rf "$DEBROOT"
deb_s=$(seconds "$start" "$(now)")

# --- report --------------------------------------------------------------------------------
# The previous build's figures stay beside the new ones: the smoke test compares size and start-up.
if test -f "$WORK/build-report.json"; then cp "$WORK/build-report.json" "$WORK/previous-build-report.json"; fi
folder_bytes=$(du -sb "$BUNDLE" | cut -f1)
files=$(find "$BUNDLE" -type f | wc -l)
tar_bytes=$(stat -c %s "$TARBALL")
deb_bytes=$(stat -c %s "$DEB")
cat > "$WORK/build-report.json" <<EOF
{"version": "$VERSION", "variant": "$MEDSEG_VARIANT", "bundle_seconds": $bundle_s, "sbom_seconds": $sbom_s, "tar_seconds": $tar_s,
 "deb_seconds": $deb_s, "folder_bytes": $folder_bytes, "files": $files, "tar_gz_bytes": $tar_bytes, "deb_bytes": $deb_bytes}
EOF
mb() { awk -v b="$1" 'BEGIN { printf "%.0f MB", b / 1e6 }'; }
echo "bundle   $BUNDLE  $(mb "$folder_bytes") in $files files  (PyInstaller ${bundle_s} s)"
echo "tar.gz   $TARBALL  $(mb "$tar_bytes")  (${tar_s} s)"
echo "deb      $DEB  $(mb "$deb_bytes")  (${deb_s} s)"
echo "sbom     $SBOM  and ${SBOM%.cdx.json}.licences.txt  (${sbom_s} s)"
