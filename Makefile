# medseg developer commands. `make run` and `make test` are the README's quick start.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup run test lint bench starter starter-v2 starter-v2-gpu starter-v2-gpu-pack gpu-check gpu-check-pack liver clean installer installer-test audit

$(STAMP): pyproject.toml .ci/system-deps .ci/totalsegmentator-peer.txt
	bash .ci/system-deps
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,openvino]'
	$(PY) -m pip install -q --no-deps -r .ci/totalsegmentator-peer.txt
	touch $(STAMP)

setup: $(STAMP)

## Set up and start the app on its built-in demo study.
run: $(STAMP)
	$(PY) -m medseg demo

## Set up and run the whole test suite (this is what CI runs). The PACS tests talk to a real
## Orthanc, which must run in a private network namespace: .ci/pacs-test runs them there (root).
test: $(STAMP) lint
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q -m "not pacs" --durations=40
	bash .ci/pacs-test $(PY)

## The linters (make test runs them first): ruff (pyproject.toml's [tool.ruff]: unused code, undefined names,
## bare excepts, import order; `$(VENV)/bin/ruff check --fix .` sorts imports), the import contracts and mypy
## (the whole package: strict where pyproject's first [[tool.mypy.overrides]] says, the default checks elsewhere).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do $(PY) $$b || exit 1; done

# Retrain the shipped starter model from ../shared/data (see resources/models/starter/README.md):
# train, score on the held-out scans (recorded in model.json), add the verified ONNX export.
# About 20 minutes on a free 2-core CPU. The result lands in build/starter; copy model.json,
# weights.safetensors and model_2d.onnx into resources/models/starter to ship it.
DATA ?= ../shared/data
STARTER_TRAIN := --data-root $(DATA) --epochs 40 --iterations 40 --batch-size 6 --configuration 2d \
	--target-spacing 3 2 2 --memory-gb 0.35 --base-features 16 --max-features 64 --validate-every 10 --threads 2
starter: $(STAMP)
	$(PY) -m medseg train resources/models/starter/training_set.json --out build/starter $(STARTER_TRAIN)
	$(PY) -m medseg evaluate build/starter resources/models/starter/training_set.json --data-root $(DATA) --held-out --record
	$(PY) -m medseg export build/starter --format package -o build/starter \
		--check-image $(DATA)/ct/totalsegmentator/example_ct_dicom

# Starter v2 (issue 13, not shipped yet: see resources/models/starter/README.md, 'Starter v2'):
# a 2D configuration trained as the shipped one, then two 3D configurations planned by medseg's
# planner and started from it (--inflate-from: its kernels become the centre slice of the 3D
# kernels), combined into one package (a verified ONNX model each), then scored on the held-out
# scans (per configuration, and as the app chooses) against the rule labels and TotalSegmentator:
#   2d       3 x 2 x 2 mm, slice by slice, 192 x 192 patches (about 15 min on a free 2-core CPU),
#   3d_thin  2 mm isotropic (near-isotropic series; every axis pooled from the second stage),
#   3d_thick 5 mm slices, 2 mm in-plane (thick-slice series; z unpooled until in-plane catches up).
# The two 3D runs go side by side, one thread each (about 40 min). Held out: lung1 (the only chest
# volume), example_ct_dicom (abdomen), ge_head_tilt (head). The result lands in build/starter_v2.
V2_SET := resources/models/starter/training_set_v2.json
V2_COMMON := --data-root $(DATA) --validate-every 10 --threads 2 --base-features 16 --max-features 64
V2_2D := --configuration 2d --configuration-name 2d --target-spacing 3 2 2 --memory-gb 0.35 \
	--epochs 40 --iterations 40 --batch-size 6
V2_3D := --configuration 3d_fullres --stages 6 --inflate-from build/starter_2d --lr 0.002 \
	--epochs 30 --iterations 15 --batch-size 2 --validate-every 1000 --threads 1
V2_SCORE := --data-root $(DATA) --held-out --record
starter-v2: $(STAMP)
	$(PY) -m medseg train $(V2_SET) --out build/starter_2d $(V2_COMMON) $(V2_2D)
	$(PY) -m medseg train $(V2_SET) --out build/starter_thin $(V2_COMMON) $(V2_3D) \
		--configuration-name 3d_thin --target-spacing 2 2 2 --memory-gb 1.0 & thin=$$!; \
	$(PY) -m medseg train $(V2_SET) --out build/starter_thick $(V2_COMMON) $(V2_3D) \
		--configuration-name 3d_thick --target-spacing 5 2 2 --memory-gb 1.5; thick=$$?; \
	wait $$thin && test $$thick -eq 0
	$(PY) -m medseg export build/starter_2d build/starter_thin build/starter_thick --format package \
		-o build/starter_v2 --check-image $(DATA)/ct/totalsegmentator/example_ct_dicom
	$(PY) benchmarks/bench_starter.py --model build/starter_v2 --manifest $(V2_SET) --json build/starter_v2.bench.json
	$(PY) -m medseg evaluate build/starter_v2 $(V2_SET) $(V2_SCORE)
	for c in 2d 3d_thin 3d_thick; do \
		$(PY) -m medseg evaluate build/starter_v2 $(V2_SET) $(V2_SCORE) --configuration $$c || exit 1; done
	$(PY) -m medseg evaluate build/starter_v2 resources/models/starter/reference_totalsegmentator.json $(V2_SCORE)

# Starter v2 on a GPU (issue 27): the same recipe and held-out scoring in one GPU run of <= 8 minutes,
# each configuration trained for its share of the time (epochs from its measured rate), a 3D
# configuration kept only where it beats the 2D one on the held-out scans. The GPU machine has no
# SimpleITK or imagecodecs: pack the cases here as .npz (build/gpu-starter-v2, 37 MiB), carry that
# folder, and run `make starter-v2-gpu` (plain python3, no .venv) there; results in $(GPU_OUT).
GPU_OUT ?= build/starter_v2_gpu
starter-v2-gpu-pack: $(STAMP)
	$(PY) benchmarks/starter_v2_gpu.py --pack
starter-v2-gpu:
	python3 benchmarks/starter_v2_gpu.py --out $(GPU_OUT)

# The GPU check (issues 16, 27), one GPU run of <= 6 minutes: pack here (build/gpu-check, 23 MiB),
# carry it, run `make gpu-check` there (plain python3); `benchmarks/gpu_check.py --dry-run` rehearses it here.
gpu-check-pack: $(STAMP)
	$(PY) benchmarks/gpu_pack.py
gpu-check:
	python3 benchmarks/gpu_check.py --out $${OUT:-build/gpu-check-out}

# Fine-tune the starter model with a new label, the liver, and score it on another patient
# (tests/model/test_finetune_liver.py runs the same recipe).
LIVER_TRAIN := --epochs 20 --iterations 40 --batch-size 6 --validate-every 100 --no-mirror --tissue-shift -20 60
liver: $(STAMP)
	$(PY) -m medseg train resources/datasets/liver_finetune.json --data-root $(DATA) --out build/liver \
		--from resources/models/starter $(LIVER_TRAIN)
	$(PY) -m medseg evaluate build/liver resources/datasets/liver_finetune.json --data-root $(DATA) --held-out --record

# Linux installers (installers/README.md): the PyInstaller bundle, a .tar.gz and a .deb in dist/.
installer: $(STAMP)
	installers/linux/build.sh

# Smoke test of the built bundle and of the .deb installed into a bare Debian root (needs root;
# NO_CHROOT=1 tests only the bundle). About 10 minutes; not part of `make test` (see installers/README.md).
installer-test: $(STAMP)
	$(if $(NO_CHROOT),,command -v debootstrap >/dev/null || apt-get install -y --no-install-recommends debootstrap)
	$(PY) installers/linux/smoke_test.py $(if $(NO_CHROOT),--no-chroot)

# Known vulnerabilities in the pinned runtime packages (pip-audit; installers/audit.py): the report
# goes to build/audit/. Exit 2 when the vulnerability service could not be asked for every package.
audit: $(STAMP)
	$(PY) installers/audit.py $(if $(AUDIT_SERVICE),--service $(AUDIT_SERVICE))

clean:
	rm -rf $(VENV) build dist *.egg-info test-artifacts
