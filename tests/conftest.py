import os
import subprocess
from pathlib import Path

import pytest

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


ROOT = Path(__file__).resolve().parents[1]
DGL_SETUP = ROOT / "scripts" / "setup_dgl_oracle.sh"


@pytest.fixture(scope="session")
def dgl_python() -> Path:
    """The side venv's python with DGL 2.1.0; builds the venv if needed, never skips."""
    venv = Path(os.environ.get("DGL_VENV") or ROOT / ".venv-dgl")
    proc = subprocess.run(
        ["bash", str(DGL_SETUP)],
        env={**os.environ, "DGL_VENV": str(venv)},
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"the DGL oracle venv at {venv} could not be built by {DGL_SETUP} "
            f"(exit {proc.returncode}); its output ends:\n{proc.stderr[-3000:]}",
            pytrace=False,
        )
    return venv / "bin" / "python"


GS_SETUP = ROOT / "scripts" / "setup_graphstorm.sh"


@pytest.fixture(scope="session")
def gs_python() -> Path:
    """The GraphStorm 0.5.0 side venv's python (stacked on the DGL oracle venv); builds both
    when needed, never skips."""
    venv = Path(os.environ.get("GS_VENV") or ROOT / ".venv-gs")
    dgl_venv = Path(os.environ.get("DGL_VENV") or ROOT / ".venv-dgl")
    proc = subprocess.run(
        ["bash", str(GS_SETUP)],
        env={**os.environ, "GS_VENV": str(venv), "DGL_VENV": str(dgl_venv)},
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"the GraphStorm venv at {venv} could not be built by {GS_SETUP} "
            f"(exit {proc.returncode}); its output ends:\n{proc.stderr[-3000:]}",
            pytrace=False,
        )
    return venv / "bin" / "python"


@pytest.fixture(scope="module")
def gcs_emulator():
    """A real GCS JSON API server (gcp-storage-emulator) on a free loopback port, with a
    temporary data folder and the bucket `graphs`; stopped after the module (tests/gcs_emulator.py)."""
    from tests.gcs_emulator import GcsEmulator

    emulator = GcsEmulator().start()
    try:
        yield emulator
    finally:
        emulator.close()


@pytest.fixture(scope="session")
def bigquery_emulator():
    """A real BigQuery API server (bqemulator: REST and the Storage Read API) on free loopback
    ports, started once per test process and stopped at its end (tests/bigquery_emulator.py).
    Tests point the code under test at it with BEAM_GRAPH_BIGQUERY_EMULATOR_HOST = `.hosts`
    (and GOOGLE_CLOUD_PROJECT), and load tables under dataset names of their own."""
    from tests.bigquery_emulator import BigQueryEmulator

    emulator = BigQueryEmulator().start()
    try:
        yield emulator
    finally:
        emulator.close()
