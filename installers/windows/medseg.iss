; Inno Setup 6 script for medseg on Windows (x64). Built by installers\windows\build.ps1:
;   ISCC.exe /DVariant=cuda|directml /DVersion=0.1.0 /DSourceDir=<bundle> /DOutputDir=<dist> medseg.iss
; Per-user install (no administrator rights), Start-menu entry, optional desktop icon,
; "Open with medseg" for DICOM/NIfTI/NRRD/MHA files and folders, and an uninstaller.
; Relative paths below are relative to this file; tests/installers/test_spec.py checks they exist.

#ifndef Variant
  #define Variant "cuda"
#endif
#ifndef Version
  #define Version "0.1.0"
#endif
#ifndef SourceDir
  #define SourceDir "..\..\build\windows-" + Variant + "\dist\medseg"
#endif
#ifndef OutputDir
  #define OutputDir "..\..\dist"
#endif
#define GuiExe "medseg-gui.exe"
#define CliExe "medseg.exe"

[Setup]
; One AppId for both variants: installing the other variant replaces this one.
AppId={{6F1C2B9E-4C1D-4B7A-9E55-3D2A7C0B8E41}
AppName=medseg
AppVersion={#Version}
AppVerName=medseg {#Version} ({#Variant})
AppPublisher=medseg developers
DefaultDirName={autopf}\medseg
DefaultGroupName=medseg
DisableProgramGroupPage=yes
; Per-user by default (installs to %LOCALAPPDATA%\Programs\medseg); IT may choose all users.
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog commandline
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
MinVersion=10.0.17763
OutputDir={#OutputDir}
OutputBaseFilename=medseg-{#Version}-windows-{#Variant}-setup
SetupIconFile=..\..\resources\icons\medseg.ico
UninstallDisplayIcon={app}\{#GuiExe}
UninstallDisplayName=medseg {#Version} ({#Variant})
InfoBeforeFile=info-before.txt
ChangesAssociations=yes
WizardStyle=modern
Compression=lzma2/normal
SolidCompression=yes
LZMANumBlockThreads=4
#if Variant == "cuda"
; PyTorch's CUDA libraries make the bundle several GB: one setup file cannot hold it.
DiskSpanning=yes
DiskSliceSize=max
#endif

[Tasks]
Name: "desktopicon"; Description: "Create a desktop icon"; Flags: unchecked
Name: "associate"; Description: "Offer ""Open with medseg"" for DICOM (.dcm), NIfTI, NRRD and MHA files"
Name: "folderverb"; Description: "Add ""Open with medseg"" to folders (DICOM series)"

[Files]
Source: "{#SourceDir}\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{autoprograms}\medseg"; Filename: "{app}\{#GuiExe}"; Comment: "CT segmentation"
Name: "{autoprograms}\medseg device check"; Filename: "{cmd}"; Parameters: "/k ""{app}\{#CliExe}"" devices"; IconFilename: "{app}\{#GuiExe}"; Comment: "Which GPU/CPU medseg will use"
Name: "{autodesktop}\medseg"; Filename: "{app}\{#GuiExe}"; Tasks: desktopicon

[Registry]
; HKA is HKCU in a per-user install, HKLM in an all-users one.
Root: HKA; Subkey: "Software\Classes\medseg.image"; ValueType: string; ValueName: ""; ValueData: "Medical image (medseg)"; Flags: uninsdeletekey; Tasks: associate
Root: HKA; Subkey: "Software\Classes\medseg.image\DefaultIcon"; ValueType: string; ValueName: ""; ValueData: "{app}\{#GuiExe},0"; Tasks: associate
Root: HKA; Subkey: "Software\Classes\medseg.image\shell\open\command"; ValueType: string; ValueName: ""; ValueData: """{app}\{#GuiExe}"" gui ""%1"""; Tasks: associate
Root: HKA; Subkey: "Software\Classes\.dcm\OpenWithProgids"; ValueType: string; ValueName: "medseg.image"; ValueData: ""; Flags: uninsdeletevalue; Tasks: associate
Root: HKA; Subkey: "Software\Classes\.dicom\OpenWithProgids"; ValueType: string; ValueName: "medseg.image"; ValueData: ""; Flags: uninsdeletevalue; Tasks: associate
Root: HKA; Subkey: "Software\Classes\.nii\OpenWithProgids"; ValueType: string; ValueName: "medseg.image"; ValueData: ""; Flags: uninsdeletevalue; Tasks: associate
Root: HKA; Subkey: "Software\Classes\.nrrd\OpenWithProgids"; ValueType: string; ValueName: "medseg.image"; ValueData: ""; Flags: uninsdeletevalue; Tasks: associate
Root: HKA; Subkey: "Software\Classes\.mha\OpenWithProgids"; ValueType: string; ValueName: "medseg.image"; ValueData: ""; Flags: uninsdeletevalue; Tasks: associate
Root: HKA; Subkey: "Software\Classes\Applications\{#GuiExe}\SupportedTypes"; ValueType: string; ValueName: ".dcm"; ValueData: ""; Flags: uninsdeletekey; Tasks: associate
Root: HKA; Subkey: "Software\Classes\Applications\{#GuiExe}\shell\open\command"; ValueType: string; ValueName: ""; ValueData: """{app}\{#GuiExe}"" gui ""%1"""; Tasks: associate
Root: HKA; Subkey: "Software\Classes\Directory\shell\medseg"; ValueType: string; ValueName: ""; ValueData: "Open with medseg"; Flags: uninsdeletekey; Tasks: folderverb
Root: HKA; Subkey: "Software\Classes\Directory\shell\medseg"; ValueType: string; ValueName: "Icon"; ValueData: "{app}\{#GuiExe},0"; Tasks: folderverb
Root: HKA; Subkey: "Software\Classes\Directory\shell\medseg\command"; ValueType: string; ValueName: ""; ValueData: """{app}\{#GuiExe}"" gui ""%1"""; Tasks: folderverb

[Run]
Filename: "{cmd}"; Parameters: "/k ""{app}\{#CliExe}"" devices"; Description: "Check which GPU/CPU medseg will use"; Flags: postinstall skipifsilent unchecked nowait
Filename: "{app}\{#GuiExe}"; Description: "Start medseg"; Flags: postinstall skipifsilent nowait

[UninstallDelete]
; Files the app writes next to itself (Python caches); user data and logs live elsewhere and stay.
Type: filesandordirs; Name: "{app}\_internal\__pycache__"
Type: dirifempty; Name: "{app}"
