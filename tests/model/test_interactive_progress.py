"""A prompt's progress, network pass by network pass, and its cost said before it runs, on a real session.

The session is medseg's on the small nnInteractive checkpoint of tests/model/interactive_fixture.py (an 80^3
patch, random weights) and the lung1 CT around its tumour. The oracle for the progress is the network itself:
the runner is wrapped so that every real forward pass leaves a mark in the same list the progress reports go
to, so the test sees whether each pass was announced before it ran and reported done after, and whether the
pass count said ("pass 3 of 5") is the count that ran. The box is the parity test's: large enough to zoom out
and be refined patch by patch, so one prompt runs several passes of different kinds.

The cost before a prompt comes from the calibration record (runtime.json, written here by calibrate() as the
install writes it) and then from the session's own last pass; the oracle is the record read back as JSON.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest
from interactive_fixture import lung1_tumour_crop, make_nninteractive_folder

from medseg.model.interactive.calibration import calibrate
from medseg.model.interactive.model_files import import_nninteractive
from medseg.model.interactive.runtimes import CHOICE_FILE, make_runner
from medseg.model.interactive.session import InteractiveSession

PATCH, FEATURES = 80, 4


@pytest.fixture(scope="module")
def case(tmp_path_factory, shared_data):
    folder = make_nninteractive_folder(tmp_path_factory.mktemp("progress"), patch_size=(PATCH,) * 3,
                                       base_features=FEATURES, max_features=8 * FEATURES)
    return (folder, *lung1_tumour_crop(shared_data))


def test_every_network_pass_is_reported_as_it_starts_and_ends(case):
    folder, image, (z, y, x) = case
    model = import_nninteractive(folder)
    network = make_runner(model, "torch")
    events: list[tuple[str, str, float]] = []

    def runner(batch):  # the real network, leaving a mark where it ran
        events.append(("ran", "", -1.0))
        return network(batch)

    session = InteractiveSession(model, runner=runner)
    session.set_image(image)
    session.progress_with(lambda step: events.append((step.stage, step.text, step.fraction)))
    result = session.add_box([[z, z + 1], [y - 38, y + 38], [x - 38, x + 38]])

    planning = [i for i, event in enumerate(events) if event[0] == "plan"]
    assert len(planning) == 1 and events[planning[0]][1].startswith("pass ")  # once, between the zoomed passes
    assert "refining at full resolution (patch 1 of " in events[planning[0] + 1][1]  # and the refinement
    del events[planning[0]]
    ran = [i for i, event in enumerate(events) if event[0] == "ran"]
    assert len(ran) >= 3, "the box no longer zooms out and refines: the test would not see passes of every kind"
    assert len(events) == 3 * len(ran)  # nothing but a start, the pass and its end
    for number, at in enumerate(ran, 1):
        start, end = events[at - 1], events[at + 1]
        assert start[0] == "pass-start" and start[1].startswith(f"pass {number} of ")
        assert end[0] == "pass-end" and end[1].startswith(f"pass {number} of ") and " done in " in end[1]
    # the count said is never more than what ran, and once the refinement is planned it is exact
    for stage, text, _fraction in events:
        if stage != "ran":
            said = int(re.match(r"pass \d+ of (\d+)", text).group(1))
            assert said <= len(ran)
    assert events[-1][1].startswith(f"pass {len(ran)} of {len(ran)} done")
    assert events[-1][2] == 1.0
    texts = [text for stage, text, _ in events if stage == "pass-start"]
    assert "zoomed out" in texts[0]  # the box's own zoom: its surroundings, not the patch
    assert any("refining at full resolution (patch 1 of " in text for text in texts)
    assert any(" or more" in text for text in texts[:-1])  # a zoomed pass says more passes follow
    assert len(ran) == result.passes


def test_a_prompts_cost_is_said_before_it_runs_from_the_calibration_then_the_last_pass(case, tmp_path):
    folder, image, (z, y, x) = case
    copy = shutil.copytree(folder, tmp_path / "model")  # calibration writes into the folder: not the shared one
    calibrate(import_nninteractive(copy), copy, candidates=["torch"])
    recorded = json.loads((copy / CHOICE_FILE).read_text())["measured"]["torch"]["seconds"]

    session = InteractiveSession(import_nninteractive(copy), "cpu", runtime="torch")
    session.set_image(image)
    click = session.cost((1, 1, 1))
    assert click.passes == 1 and click.seconds_per_pass == pytest.approx(recorded)
    assert click.text().startswith("about ") and "on this computer (1 network pass of about" in click.text()
    assert "measured when the model was installed" in click.text()
    box = session.cost((1, 76, 76))  # wider than the 80^3 patch allows with a third around it: zooms out
    assert box.passes > 1 and box.seconds == pytest.approx(box.passes * recorded)
    assert f"about {box.passes} network passes" in box.text()

    steps = []
    session.progress_with(steps.append)
    session.add_point([z, y, x])
    measured = [float(re.search(r"done in ([\d.]+) s", s.text).group(1)) for s in steps if s.stage == "pass-end"]
    after = session.cost((1, 1, 1))
    rounding = 0.051 if measured[-1] < 10 else 0.51  # the text gives 0.1 s below 10 s, whole seconds above
    assert after.seconds_per_pass == pytest.approx(measured[-1], abs=rounding)
    assert "as the last pass took" in after.text()


def test_without_a_measurement_the_cost_says_so(case):
    folder, image, _centre = case
    session = InteractiveSession(import_nninteractive(folder), "cpu", runtime="torch")  # no runtime.json there
    session.set_image(image)
    text = session.cost((1, 1, 1)).text()
    assert "not measured on this computer yet" in text and "1 network pass" in text
