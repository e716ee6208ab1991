"""The CPU engine is chosen by measurement, per model (medseg.model.cpu_runtime, issues #40 and #51).

With a small nnU-Net network: the measurement (at install, ``models verify --measure``, or the app while
idle: medseg.model.engine_measurement) runs a small phantom tile through every CPU engine installed, says
which it chose, why and when, and stores it; ``--device auto`` runs on a real CT crop reuse it and never
measure themselves (with no measurement: PyTorch at once, and a measurement scheduled). The agreement it
reports is checked against each engine run here on the same tile; the labels of a run are those of the
engine it names. (No timing is asserted: which engine is faster depends on the machine.)
"""

from __future__ import annotations

import json
from datetime import date

import pytest
import torch
from infer_fixtures import CHEST, crop_volume, small_model_folder

from medseg.errors import DeviceError, ModelError
from medseg.model import backends, cpu_runtime, devices, engine_measurement
from medseg.model.devices import probe, report_lines
from medseg.model.infer import prepare, segment
from medseg.model.kinds.package_kind import where_it_runs
from medseg.model.nnunet_import import import_nnunet
from medseg.model.package import build_networks
from medseg.model.sliding_window import middle_tile


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    return import_nnunet(small_model_folder(tmp_path_factory.mktemp("nnunet")))


@pytest.fixture
def measuring(monkeypatch, tmp_path):
    """No pinned engine (the suite pins PyTorch), and a cache folder of this test's own."""
    monkeypatch.delenv(cpu_runtime.PIN_VARIABLE, raising=False)
    monkeypatch.setenv("MEDSEG_CACHE_DIR", str(tmp_path / "cache"))
    for wanted in cpu_runtime.scheduled():  # what another test's runs asked for
        cpu_runtime.unschedule(*wanted)
    return tmp_path / "cache" / cpu_runtime.STORE_NAME


def test_a_measurement_chooses_the_engine_and_runs_reuse_the_choice(package, ct_dir, measuring, fake_machine):
    fake_machine(cuda=0)  # a CPU-only machine, with ONNX Runtime's CPU provider: two CPU engines
    choice = engine_measurement.measure_model(package, "3d_fullres")
    engine = choice.to_dict()
    assert engine["measured"] and set(engine["seconds"]) == {"cpu", "onnx-cpu"}
    assert engine["reason"].startswith(f"measured on {date.today().isoformat()}: ")
    # the agreement it reports is what the two engines give on its tile, run here
    tile = engine_measurement.measurement_tile(package, "3d_fullres")
    torch_runner = backends.TorchRunner(build_networks(package, "3d_fullres"), "cpu")
    onnx_runner = backends.OnnxRunner(cpu_runtime.exact_onnx(package, "3d_fullres"), "onnx-cpu")
    labels = {"cpu": torch_runner(tile).argmax(1), "onnx-cpu": onnx_runner(tile).argmax(1)}
    assert engine["tile"] == list(tile.shape[2:])
    assert engine["agreement"]["onnx-cpu"] == pytest.approx(float((labels["onnx-cpu"] == labels["cpu"]).float().mean()),
                                                            abs=1e-6)
    # the rule, applied to what it measured (each engine's memory too)
    speedup = engine["seconds"]["cpu"] / engine["seconds"]["onnx-cpu"]
    fits = engine["peak_mb"]["onnx-cpu"] * cpu_runtime.MEMORY_HEADROOM <= engine["free_mb"] or \
        engine["peak_mb"]["onnx-cpu"] <= engine["peak_mb"]["cpu"]
    wins = engine["agreement"]["onnx-cpu"] >= cpu_runtime.PARITY and speedup >= cpu_runtime.MARGIN and fits
    assert engine["device"] == ("onnx-cpu" if wins else "cpu")
    # stored, and a run uses it without measuring: the same figures come back
    assert measuring.is_file()
    volume = crop_volume(ct_dir, CHEST)
    run = segment(volume, package, device="auto")
    assert run.cpu_engine == engine and run.device_used == engine["device"]
    # the run's labels are the named engine's
    explicit = segment(volume, package, device=engine["device"])
    assert (run.label_map.array == explicit.label_map.array).all()
    assert explicit.cpu_engine is None  # a device the user named is not a choice to explain


@pytest.fixture
def never_measures(monkeypatch):
    """A measurement is an error: what a run with no measurement must not do."""
    real = cpu_runtime.measure

    def refuse(*_args, **_kwargs):
        raise AssertionError("a run measured the CPU engines")

    monkeypatch.setattr(cpu_runtime, "measure", refuse)
    return real  # for the measurement the test then makes


def test_a_run_with_no_measurement_runs_the_default_at_once_and_schedules_one(package, ct_dir, measuring,
                                                                              fake_machine, never_measures,
                                                                              monkeypatch):
    """Issue #51: the first Segment paid the measurement. Now it runs PyTorch at once, says why in the plan and
    the result, and asks for a measurement, which the app makes while idle (measure_scheduled)."""
    fake_machine(cuda=0)
    volume = crop_volume(ct_dir, CHEST)
    plan = where_it_runs(package, "3d_fullres", "auto")
    assert plan[1].startswith("engine: PyTorch (not measured on this computer yet: the default, PyTorch, runs at once")
    result = segment(volume, package, device="auto")
    assert (result.device_used, result.cpu_engine["measured"]) == ("cpu", False)
    assert "not measured on this computer yet" in result.cpu_engine["reason"]
    assert not measuring.exists()
    assert [(p, c) for p, c, _threads in cpu_runtime.scheduled()] == [(package, "3d_fullres")]
    monkeypatch.setattr(cpu_runtime, "measure", never_measures)  # the measurement itself again: in the background
    assert engine_measurement.measure_scheduled() == 1
    assert cpu_runtime.scheduled() == []
    (record,) = json.loads(measuring.read_text()).values()
    assert record["measured_on"] == date.today().isoformat()
    plan = where_it_runs(package, "3d_fullres", "auto")
    assert plan[1] == f"engine: {record['engine']} ({record['reason']})" and "measured on" in plan[1]


def test_a_changed_machine_schedules_a_new_measurement_and_runs_the_default(package, ct_dir, measuring, fake_machine,
                                                                            monkeypatch):
    fake_machine(cuda=0)
    measured = engine_measurement.measure_model(package, "3d_fullres")
    before = json.loads(measuring.read_text())
    real_memory = devices._memory_bytes() or 2**34
    monkeypatch.setattr(devices, "_memory_bytes", lambda: real_memory + 8 * 2**30)  # 8 GB more: another machine
    monkeypatch.setattr(cpu_runtime, "measure", lambda *a, **k: pytest.fail("measured inline"))
    result = segment(crop_volume(ct_dir, CHEST), package, device="auto")
    # the engine measured on the old machine (its guess until the new measurement), not measured here
    assert (result.device_used, result.cpu_engine["measured"]) == (measured.device, False)
    reason = result.cpu_engine["reason"]
    old_gb, new_gb = round(real_memory / 2**30), round((real_memory + 8 * 2**30) / 2**30)
    assert reason.startswith(f"this computer changed since the measurement (memory (GB) {old_gb} → {new_gb})"), reason
    assert ("as measured then" in reason) == (measured.device != "cpu")
    assert [(p, c) for p, c, _threads in cpu_runtime.scheduled()] == [(package, "3d_fullres")]
    assert json.loads(measuring.read_text()) == before  # the old machine's record stays
    assert measured.machine["memory_gb"] == old_gb


def test_a_damaged_store_runs_the_default_and_is_written_anew(package, ct_dir, measuring, fake_machine,
                                                               never_measures, monkeypatch):
    fake_machine(cuda=0)
    measuring.parent.mkdir(parents=True)
    measuring.write_text("{ not json")
    result = segment(crop_volume(ct_dir, CHEST), package, device="auto")
    assert not result.cpu_engine["measured"] and result.device_used == "cpu"
    monkeypatch.setattr(cpu_runtime, "measure", never_measures)
    assert engine_measurement.measure_model(package, "3d_fullres").measured
    assert json.loads(measuring.read_text())  # written anew


def test_an_engine_can_be_pinned_for_every_model(package, ct_dir, measuring, monkeypatch, fake_machine):
    fake_machine(cuda=0)
    monkeypatch.setenv(cpu_runtime.PIN_VARIABLE, "onnx-cpu")
    result = segment(crop_volume(ct_dir, CHEST), package, device="auto")
    assert result.device_used == "onnx-cpu" and not result.cpu_engine["measured"]
    assert cpu_runtime.PIN_VARIABLE in result.cpu_engine["reason"]
    assert not measuring.exists()
    monkeypatch.setenv(cpu_runtime.PIN_VARIABLE, "cuda")
    with pytest.raises(DeviceError, match="not a CPU engine"):
        segment(crop_volume(ct_dir, CHEST), package, device="auto")


def test_the_plan_says_which_engine_before_anything_is_measured(package, measuring, fake_machine):
    fake_machine(cuda=0)
    choice = cpu_runtime.planned_choice(package, "3d_fullres", 2)
    assert (choice.device, choice.measured) == ("cpu", False)
    assert "ONNX Runtime" in choice.reason  # what the measurement will compare it with
    assert backends.resolve_device("auto") == "cpu"


def _tile(package, volume):
    prepared = prepare(volume, package)
    return prepared.configuration, middle_tile(prepared.image.data, prepared.plan.patch_size, 0.5)


def test_openvino_computes_pytorchs_labels_on_a_real_ct_tile_from_the_exact_norm_export(package, ct_dir, measuring):
    """The oracle is PyTorch on the same tile of a real chest CT. The export is made once per model."""
    configuration, tile = _tile(package, crop_volume(ct_dir, CHEST))
    path = cpu_runtime.exact_onnx(package, configuration)
    assert path.is_file() and path.parent.parent == measuring.parent
    written = path.stat().st_mtime_ns
    openvino = backends.OpenVinoRunner(path, "f32", threads=2, name="openvino-cpu")
    with torch.inference_mode():
        reference = backends.TorchRunner(build_networks(package, configuration), "cpu")(tile)
        logits = openvino(tile)
    assert logits.shape == reference.shape
    assert float((logits - reference).abs().max()) < 1e-3 * float(reference.abs().max())
    assert float((logits.argmax(1) == reference.argmax(1)).float().mean()) >= cpu_runtime.PARITY
    assert cpu_runtime.exact_onnx(package, configuration).stat().st_mtime_ns == written  # not exported again


def test_openvino_compiles_for_each_input_shape_it_is_given(package, ct_dir, measuring, tmp_path):
    """Compiled for the exact shape (OpenVINO plans its memory only for a static one): a batch of two tiles
    recompiles and gives each tile's own logits (PyTorch the oracle); a damaged file is refused up front."""
    configuration, tile = _tile(package, crop_volume(ct_dir, CHEST))
    openvino = backends.OpenVinoRunner(cpu_runtime.exact_onnx(package, configuration), "f32", threads=2,
                                       shape=tile.shape)
    assert openvino.shape == tuple(tile.shape)
    pair = torch.cat([tile, tile.flip(-1)])
    with torch.inference_mode():
        reference = backends.TorchRunner(build_networks(package, configuration), "cpu")(pair)
        logits = openvino(pair)
    assert openvino.shape == tuple(pair.shape) and logits.shape == reference.shape
    assert float((logits - reference).abs().max()) < 1e-3 * float(reference.abs().max())
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a network")
    with pytest.raises(ModelError, match="OpenVINO could not read") as raised:
        backends.OpenVinoRunner(broken, "f32", threads=2)
    assert raised.value.path == broken


class _MeasuredEngines:
    """What cpu_runtime's measurement reads, set by the test: each engine's seconds for the tile (a clock that moves
    only while a measured engine runs it) and its memory peak, so which engine is faster or larger is the test's
    choice, not this machine's. The engines still run the real tile (their labels are compared)."""

    def __init__(self, monkeypatch, seconds: dict[str, float], peaks_mb: dict[str, float]) -> None:
        import time

        from medseg.model import peak_memory

        self.seconds, self.peaks_mb, self.now, self.device = seconds, peaks_mb, 0.0, "cpu"
        engines = self
        measure = cpu_runtime.measure

        class Clock:
            def __getattr__(self, name):
                return getattr(time, name)

            def perf_counter(self) -> float:
                return engines.now

        class Peak:
            def __enter__(self):
                return self

            def __exit__(self, *exc) -> None:
                pass

            @property
            def peak_mb(self) -> float:
                return engines.peaks_mb[engines.device]

        def measured(package, configuration, tile, threads, make_runner, cancel=None, prepare=None):
            def runner_for(device):
                engines.device = device
                runner = make_runner(device)

                def run(batch):
                    out = runner(batch)
                    engines.now += engines.seconds[device]
                    return out
                return run

            with monkeypatch.context() as inside:
                inside.setattr(cpu_runtime, "time", Clock())
                inside.setattr(peak_memory, "PeakMemory", Peak)
                return measure(package, configuration, tile, threads, runner_for, cancel, prepare)

        monkeypatch.setattr(cpu_runtime, "measure", measured)


@pytest.mark.parametrize(("openvino_seconds", "openvino_mb"), [(0.5, 420.0), (2.0, 420.0), (0.5, 900.0)],
                         ids=["faster", "slower", "faster-over-the-memory-budget"])  # against PyTorch's 1 s, 300 MB
def test_the_measurement_weighs_time_and_memory_and_records_why(package, ct_dir, measuring, monkeypatch, fake_machine,
                                                                openvino_seconds, openvino_mb):
    fake_machine(cuda=0, providers=(), openvino=True)  # PyTorch and OpenVINO only
    # 420 MB: OpenVINO slab by slab, 1.4x PyTorch's 300 MB; 900 MB: compiled whole, 3x (as measured on a real CT, scaled)
    _MeasuredEngines(monkeypatch, {"cpu": 1.0, "openvino-cpu": openvino_seconds}, {"cpu": 300.0, "openvino-cpu": openvino_mb})
    monkeypatch.setattr(cpu_runtime, "free_memory_mb", lambda: 64_000.0)
    volume = crop_volume(ct_dir, CHEST)
    engine_measurement.measure_model(package, "3d_fullres")
    result = segment(volume, package, device="auto")
    engine = result.cpu_engine
    assert engine["seconds"] == {"cpu": 1.0, "openvino-cpu": openvino_seconds}
    assert engine["peak_mb"] == {"cpu": 300.0, "openvino-cpu": openvino_mb}
    assert engine["agreement"]["openvino-cpu"] >= cpu_runtime.PARITY  # the real engines' labels
    chosen = openvino_seconds == 0.5 and openvino_mb == 420.0  # the parameters, not the machine
    assert engine["device"] == result.device_used == ("openvino-cpu" if chosen else "cpu")
    expected = {
        (0.5, 420.0): "OpenVINO: 2.00× PyTorch's speed on this model's tile here, 420 MB peak for a tile against "
                      "PyTorch's 300 MB, labels",
        (2.0, 420.0): "OpenVINO 0.50× PyTorch's speed (needs 1.10×)",
        # over max(1.5 x 300, 300 + 256) MB: the faster engine is refused for its memory, with both figures
        (0.5, 900.0): "OpenVINO was 2.00× PyTorch's speed but needs 900 MB for a tile, over the memory budget of "
                      "556 MB (1.5× PyTorch's 300 MB): PyTorch",
    }[(openvino_seconds, openvino_mb)]
    assert engine["reason"].startswith("measured on ") and expected in engine["reason"], engine["reason"]
    # the run's labels are the named engine's
    explicit = segment(volume, package, device=engine["device"])
    assert (result.label_map.array == explicit.label_map.array).all()
    if not chosen:
        return
    # a later run with 450 MB free: OpenVINO's 420 MB a tile (and a quarter more) do not fit, PyTorch's 300 MB do
    monkeypatch.setattr(cpu_runtime, "free_memory_mb", lambda: 450.0)
    later = segment(volume, package, device="auto")
    assert later.device_used == "cpu", later.cpu_engine
    assert later.cpu_engine["reason"].startswith("OpenVINO was measured fastest but needs about 420 MB"), \
        later.cpu_engine["reason"]


def test_openvino_can_be_pinned_and_is_refused_when_absent(package, ct_dir, measuring, monkeypatch, fake_machine):
    fake_machine(cuda=0, openvino=True)
    monkeypatch.setenv(cpu_runtime.PIN_VARIABLE, "openvino-cpu")
    volume = crop_volume(ct_dir, CHEST)
    result = segment(volume, package, device="auto")
    assert (result.device_used, result.cpu_engine["engine"]) == ("openvino-cpu", "OpenVINO")
    assert not measuring.exists()
    fake_machine(cuda=0, openvino=False)
    with pytest.raises(DeviceError, match=r"OpenVINO is not installed") as caught:
        segment(volume, package, device="auto")
    assert "medseg[openvino]" in caught.value.hint


def test_without_openvino_it_is_not_offered_and_the_reason_is_said(package, measuring, fake_machine):
    fake_machine(cuda=0, openvino=False)
    assert backends.cpu_devices() == ["cpu", "onnx-cpu"]
    with pytest.raises(DeviceError, match="OpenVINO is not installed"):
        backends.resolve_device("openvino-cpu")
    choice = cpu_runtime.planned_choice(package, "3d_fullres", 2)
    assert "OpenVINO" not in choice.reason and "ONNX Runtime" in choice.reason
    assert any("OpenVINO not installed: pip install 'medseg[openvino]'" in line for line in report_lines(probe()))
    fake_machine(cuda=0, openvino=True)
    assert backends.cpu_devices() == ["cpu", "onnx-cpu", "openvino-cpu"]
    assert "ONNX Runtime and OpenVINO" in cpu_runtime.planned_choice(package, "3d_fullres", 2).reason
