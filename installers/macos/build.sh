#!/usr/bin/env bash
# Build medseg.app and a .dmg for Apple silicon (arm64), from installers/medseg.spec.
#
#   installers/macos/build.sh                      # unsigned .app + .dmg (runs on the build Mac)
#   MACOS_SIGN_IDENTITY="Developer ID Application: Example (TEAMID)" \
#   MACOS_NOTARY_PROFILE=medseg-notary installers/macos/build.sh   # signed, notarised, stapled
#
# Needs: macOS 12+ on arm64, Python 3.11 arm64 (python.org or Homebrew: PYTHON=...), Xcode
# command line tools (codesign, hdiutil, xcrun). PyTorch from PyPI for arm64 includes MPS.
# Signing and notarisation: see installers/README.md ("macOS").
# Output: dist/medseg-<version>-macos-arm64.dmg; work files in build/macos/.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
SPEC="$ROOT/installers/medseg.spec"
ENTITLEMENTS="$ROOT/installers/macos/entitlements.plist"
ICON="$ROOT/resources/icons/medseg.icns"
WORK="$ROOT/build/macos"
DIST="$ROOT/dist"
PYTHON="${PYTHON:-python3.11}"

[ "$(uname -s)" = Darwin ] || { echo "macos/build.sh: run this on a Mac" >&2; exit 1; }
[ "$(uname -m)" = arm64 ] || { echo "macos/build.sh: builds the arm64 app; run it on Apple silicon" >&2; exit 1; }
for needed in "$SPEC" "$ENTITLEMENTS" "$ICON"; do
  [ -e "$needed" ] || { echo "macos/build.sh: missing $needed" >&2; exit 1; }
done
mkdir -p "$WORK" "$DIST"

echo "==> venv"
rm -rf "$WORK/venv"
"$PYTHON" -m venv "$WORK/venv"
PY="$WORK/venv/bin/python"
"$PY" -m pip install -q --upgrade pip
"$PY" -m pip install -q "$ROOT[installer]"
VERSION="$("$PY" -c 'import medseg; print(medseg.__version__)')"

echo "==> PyInstaller (.app)"
start=$(date +%s)
MEDSEG_VARIANT=mps "$PY" -m PyInstaller --noconfirm --log-level WARN --distpath "$WORK/dist" \
  --workpath "$WORK/pyinstaller" "$SPEC"
APP="$WORK/dist/medseg.app"
echo "bundle built in $(( $(date +%s) - start )) s: $(du -sh "$APP" | cut -f1)"

echo "==> smoke check (offscreen)"
QT_QPA_PLATFORM=offscreen "$APP/Contents/MacOS/medseg" --version
QT_QPA_PLATFORM=offscreen "$APP/Contents/MacOS/medseg" devices
QT_QPA_PLATFORM=offscreen "$APP/Contents/MacOS/medseg" demo --screenshot "$WORK/demo.png"

if [ -n "${MACOS_SIGN_IDENTITY:-}" ]; then
  echo "==> codesign (hardened runtime) with $MACOS_SIGN_IDENTITY"
  # Inside out: every library and executable first, then the app. --deep is not used: Apple
  # advises against it, and it would not apply the entitlements to the nested executables.
  find "$APP/Contents" -type f \( -name '*.dylib' -o -name '*.so' -o -perm -u+x \) -print0 |
    while IFS= read -r -d '' file; do
      if file "$file" | grep -q 'Mach-O'; then
        codesign --force --timestamp --options runtime --entitlements "$ENTITLEMENTS" \
          --sign "$MACOS_SIGN_IDENTITY" "$file"
      fi
    done
  codesign --force --timestamp --options runtime --entitlements "$ENTITLEMENTS" \
    --sign "$MACOS_SIGN_IDENTITY" "$APP"
  codesign --verify --strict --verbose=2 "$APP"
fi

echo "==> dmg"
STAGE="$WORK/dmg"
rm -rf "$STAGE"
mkdir -p "$STAGE"
cp -R "$APP" "$STAGE/"
ln -s /Applications "$STAGE/Applications"
DMG="$DIST/medseg-$VERSION-macos-arm64.dmg"
rm -f "$DMG"
hdiutil create -volname "medseg $VERSION" -srcfolder "$STAGE" -ov -format UDZO "$DMG"

if [ -n "${MACOS_SIGN_IDENTITY:-}" ]; then
  codesign --force --timestamp --sign "$MACOS_SIGN_IDENTITY" "$DMG"
fi
if [ -n "${MACOS_NOTARY_PROFILE:-}" ]; then
  echo "==> notarise ($MACOS_NOTARY_PROFILE) and staple"
  # The profile is made once with: xcrun notarytool store-credentials medseg-notary --apple-id ... --team-id ...
  xcrun notarytool submit "$DMG" --keychain-profile "$MACOS_NOTARY_PROFILE" --wait
  xcrun stapler staple "$DMG"
  spctl --assess --type open --context context:primary-signature --verbose "$DMG"
fi
echo "dmg: $DMG ($(du -h "$DMG" | cut -f1))"
