"""Names the catalogue tests share (importable by name: every test folder has its own conftest)."""

from nnunet_fixture import DATASET_NAME

MODEL_ID = "test/tiny"
LICENSED_ID = "test/licensed"
ZIP_NAME = f"{DATASET_NAME}.zip"
