"""Build variants: a source checkout trains; the DirectML bundle refuses to, clearly and early."""

from __future__ import annotations

import json

import pytest

from medseg import build_info
from medseg.cli import main
from medseg.errors import DeviceError


@pytest.fixture
def bundled_as(tmp_path, monkeypatch):
    """Pretend the running medseg is a bundle whose build recorded ``variant``."""

    def make(variant: str) -> None:
        (tmp_path / build_info.BUILD_INFO_FILE).write_text(json.dumps({"variant": variant, "platform": "win32"}))
        monkeypatch.setattr(build_info.resources, "files", lambda package: tmp_path)
        build_info.build_info.cache_clear()

    yield make
    build_info.build_info.cache_clear()


def test_source_checkout_can_train():
    build_info.build_info.cache_clear()
    assert build_info.variant() == "source"
    assert build_info.training_unavailable_reason() is None
    build_info.require_training()  # no error


def test_recorded_variant_is_read(bundled_as):
    bundled_as("cuda")
    assert build_info.variant() == "cuda"
    assert build_info.training_unavailable_reason() is None


def test_directml_build_refuses_training_before_reading_anything(bundled_as, tmp_path, capsys):
    bundled_as("directml")
    with pytest.raises(DeviceError, match="DirectML build .* cannot train"):
        build_info.require_training()
    # The CLI stops before it looks at the (missing) manifest, with the reason.
    assert main(["train", str(tmp_path / "no-such-manifest.json"), "--out", str(tmp_path / "out")]) == 1
    error = capsys.readouterr().err
    assert "training is not available" in error and "DirectML" in error and "no-such-manifest" not in error
    assert not (tmp_path / "out").exists()


def test_training_engine_refuses_too(bundled_as, tmp_path):
    from medseg.model.train import train

    bundled_as("directml")
    with pytest.raises(DeviceError, match="cannot train"):
        next(train(dataset=None, out_dir=tmp_path / "out"))  # type: ignore[arg-type]
    assert not (tmp_path / "out").exists()
