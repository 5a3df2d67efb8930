"""Packaging for the sampler library and its Beam pipelines.

Used by `pip install -e .` locally and by Beam's `--setup_file ./setup.py` on
Dataflow, which builds this package and installs it on every worker.
"""

import pathlib

import setuptools

ROOT = pathlib.Path(__file__).parent


def _requirements():
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


setuptools.setup(
    name="beam-graph-sampler",
    version="0.1.0",
    description="Sample and partition huge heterogeneous graphs for GNN training on Apache Beam.",
    python_requires="==3.11.*",
    packages=setuptools.find_packages(include=["sampler", "sampler.*", "pipelines", "pipelines.*"]),
    install_requires=_requirements(),
    extras_require={"plot": ["matplotlib==3.11.2"]},
    entry_points={
        "console_scripts": [
            "graph_sampler=pipelines.sample:main",
            "graph_partition=pipelines.partition:main",
            "beam-graph=pipelines.cli:main",
        ],
    },
)
