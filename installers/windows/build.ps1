<#
.SYNOPSIS
  Build the Windows installer of medseg (one variant): a PyInstaller bundle from
  installers\medseg.spec, smoke-checked, then packed by Inno Setup (installers\windows\medseg.iss).

.DESCRIPTION
  Variants (see installers\README.md):
    cuda      PyTorch with CUDA (NVIDIA GPUs; needs only the NVIDIA driver on the workstation).
    directml  ONNX Runtime with DirectML (any DirectX 12 GPU: AMD, Intel, NVIDIA) for inference;
              CPU PyTorch for the rest. Training is disabled in this variant (medseg.build_info).
  Needs: Windows 10/11 x64, Python 3.11 x64 (python.org or `py` launcher), Inno Setup 6
  (ISCC.exe), internet for pip (or a wheelhouse: -Wheelhouse). Run from any folder:

    powershell -ExecutionPolicy Bypass -File installers\windows\build.ps1 -Variant cuda
    powershell -ExecutionPolicy Bypass -File installers\windows\build.ps1 -Variant directml

  Output: dist\medseg-<version>-windows-<variant>-setup.exe (plus .bin slices for the CUDA
  variant, which is larger than one setup file can hold). Work files: build\windows-<variant>\.
#>
param(
    [ValidateSet("cuda", "directml")] [string] $Variant = "cuda",
    [string] $Python = "py",
    [string[]] $PythonArgs = @("-3.11"),
    # PyTorch's CUDA wheels live on its own index; pick the CUDA line your drivers support.
    [string] $TorchCudaIndex = "https://download.pytorch.org/whl/cu128",
    [string] $TorchCpuIndex = "https://download.pytorch.org/whl/cpu",
    # Latest onnxruntime-directml on PyPI when this was written (stack-notes §4); win_amd64 only.
    [string] $DirectMLVersion = "1.24.4",
    [string] $InnoSetup = "${env:ProgramFiles(x86)}\Inno Setup 6\ISCC.exe",
    [string] $Wheelhouse = ""
)
$ErrorActionPreference = "Stop"
Set-StrictMode -Version Latest

$Root = (Resolve-Path (Join-Path $PSScriptRoot "..\..")).Path
$Spec = Join-Path $Root 'installers\medseg.spec'
$Iss = Join-Path $Root 'installers\windows\medseg.iss'
$Icon = Join-Path $Root 'resources\icons\medseg.ico'
$Work = Join-Path $Root "build\windows-$Variant"
$Venv = Join-Path $Work "venv"
$DistDir = Join-Path $Work "dist"
foreach ($needed in @($Spec, $Iss, $Icon)) {
    if (-not (Test-Path $needed)) { throw "build.ps1: missing $needed (run from a full medseg checkout)" }
}
if (-not (Test-Path $InnoSetup)) { throw "build.ps1: Inno Setup 6 not found at $InnoSetup (install it or pass -InnoSetup)" }

function Step([string] $text) { Write-Host "==> $text" -ForegroundColor Cyan }
function Invoke-Checked([string] $exe, [string[]] $arguments) {
    & $exe @arguments
    if ($LASTEXITCODE -ne 0) { throw "build.ps1: '$exe $($arguments -join ' ')' exited $LASTEXITCODE" }
}
$pipExtra = @()
if ($Wheelhouse) { $pipExtra = @("--find-links", $Wheelhouse) }

Step "venv for the $Variant variant in $Venv"
if (Test-Path $Venv) { Remove-Item -Recurse -Force $Venv }
Invoke-Checked $Python ($PythonArgs + @("-m", "venv", $Venv))
$Py = Join-Path $Venv "Scripts\python.exe"
Invoke-Checked $Py @("-m", "pip", "install", "--upgrade", "pip")

Step "PyTorch ($Variant)"
$torchIndex = if ($Variant -eq "cuda") { $TorchCudaIndex } else { $TorchCpuIndex }
Invoke-Checked $Py (@("-m", "pip", "install", "torch==2.13.0", "--index-url", $torchIndex) + $pipExtra)

Step "medseg and PyInstaller"
Invoke-Checked $Py (@("-m", "pip", "install", "$Root[installer]") + $pipExtra)
if ($Variant -eq "directml") {
    # onnxruntime-directml provides the same `onnxruntime` module: only one may be installed.
    Invoke-Checked $Py @("-m", "pip", "uninstall", "-y", "onnxruntime")
    Invoke-Checked $Py (@("-m", "pip", "install", "onnxruntime-directml==$DirectMLVersion") + $pipExtra)
}
$Version = (& $Py -c "import medseg; print(medseg.__version__)").Trim()

Step "PyInstaller bundle"
$env:MEDSEG_VARIANT = $Variant
$started = Get-Date
Invoke-Checked $Py @("-m", "PyInstaller", "--noconfirm", "--log-level", "WARN", "--distpath", $DistDir,
    "--workpath", (Join-Path $Work "pyinstaller"), $Spec)
$Bundle = Join-Path $DistDir "medseg"
Write-Host ("bundle built in {0:N0} s" -f ((Get-Date) - $started).TotalSeconds)

Step "Smoke check of the bundle (offscreen)"
$env:QT_QPA_PLATFORM = "offscreen"
$Exe = Join-Path $Bundle "medseg.exe"
Invoke-Checked $Exe @("--version")
Invoke-Checked $Exe @("devices")
Invoke-Checked $Exe @("demo", "--screenshot", (Join-Path $Work "demo.png"))
Remove-Item Env:\QT_QPA_PLATFORM

Step "Inno Setup"
Invoke-Checked $InnoSetup @("/Qp", "/DVariant=$Variant", "/DVersion=$Version", "/DSourceDir=$Bundle",
    "/DOutputDir=$(Join-Path $Root 'dist')", $Iss)
$size = (Get-ChildItem -Recurse $Bundle | Measure-Object -Sum Length).Sum / 1MB
Write-Host ("bundle {0:N0} MB; installer in {1}" -f $size, (Join-Path $Root 'dist'))
