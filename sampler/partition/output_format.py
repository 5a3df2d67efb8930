"""What the partition files hold for their consumer: layouts, masks, splits, raw id tables.

Layouts (--layout):

  dgl         DGL's own dtypes: float features float32, integer features int64, each with
              its schema shape (a scalar is 1-D).
  graphstorm  what GraphStorm's gconstruct writes: every numeric feature that is not a label
              (--labels) or a mask is a 2-D float32 model input ([n, 1] for a scalar), and
              the folder also holds raw_id_mappings/<ntype>/part-SSSSS.parquet (`orig`: the
              Unigraph id as a string, `new`: the original type-wise id, what orig_nids.dgl
              maps the shuffled ids back to).

In every layout, features named train_mask, val_mask and test_mask are 1-D int8 holding 0
or 1 (what DGL's and GraphStorm's trainers read). `--split NTYPE:TRAIN,VAL,TEST` makes them:
a node is in the training set when the uniform draw of its fingerprint, salted with --seed
and its node type, is below TRAIN; in the validation set below TRAIN + VAL; in the test set
below TRAIN + VAL + TEST. A node's masks depend only on its id, the seed and the fractions,
never on sharding, workers or runner; the set sizes are the fractions up to sampling noise.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa

from sampler import ids
from sampler.errors import UserError
from sampler.features import FeatureSpec

LAYOUTS = ("dgl", "graphstorm")
MASK_NAMES = ("train_mask", "val_mask", "test_mask")
DEFAULT_LABELS = ("label",)
RAW_ID_DIR = "raw_id_mappings"
_SALT_SPLIT = np.uint64(0x53504C4954)  # "SPLIT"


@dataclasses.dataclass(frozen=True)
class Split:
    """Fractions of a node type's nodes in the train, validation and test masks."""

    train: float
    val: float
    test: float
    seed: int = 0


def parse_split(text: str, seed: int = 0) -> tuple[str, Split]:
    """`NTYPE:TRAIN,VAL,TEST` -> (node type, Split); a one-line UserError otherwise."""
    where = f"--split {text}"
    ntype, sep, rest = text.rpartition(":")
    values = rest.split(",")
    if not sep or not ntype or len(values) != 3:
        raise UserError(f"{where}: write NTYPE:TRAIN,VAL,TEST, e.g. paper:0.8,0.1,0.1")
    try:
        train, val, test = (float(v) for v in values)
    except ValueError:
        raise UserError(f"{where}: the fractions must be numbers, e.g. paper:0.8,0.1,0.1") from None
    if min(train, val, test) < 0 or not all(np.isfinite([train, val, test])):
        raise UserError(f"{where}: the fractions must be at least 0")
    if train + val + test > 1 + 1e-9:
        raise UserError(f"{where}: the fractions add up to {train + val + test:g}, more than 1")
    return ntype, Split(train, val, test, seed)


def split_masks(ntype: str, fp: np.ndarray, split: Split) -> dict[str, np.ndarray]:
    """The int8 train/val/test masks of nodes of `ntype` with fingerprints `fp`."""
    key = ids.combine(np.uint64(split.seed), _SALT_SPLIT, ids.fingerprint_one(ntype), fp)
    u = ids.uniform(key) if len(fp) else np.zeros(0)
    train_end = split.train
    val_end = train_end + split.val
    test_end = val_end + split.test
    return {
        "train_mask": (u < train_end).astype(np.int8),
        "val_mask": ((u >= train_end) & (u < val_end)).astype(np.int8),
        "test_mask": ((u >= val_end) & (u < test_end)).astype(np.int8),
    }


MASK_SPECS = {name: FeatureSpec(name, "int", ()) for name in MASK_NAMES}


def check_mask_spec(owner: str, spec: FeatureSpec) -> None:
    """A table feature named like a mask must be a scalar integer or boolean."""
    if spec.name in MASK_NAMES and (spec.kind != "int" or spec.width != 1):
        raise UserError(
            f"feature '{owner}/{spec.name}': a {spec.name} must be a scalar integer or boolean "
            f"(0 or 1), not a {spec.kind} feature of shape {list(spec.shape)}"
        )


def file_tensor(
    owner: str, spec: FeatureSpec, values: np.ndarray, layout: str, labels: frozenset[str]
) -> np.ndarray:
    """One feature's rows as the files of `layout` hold them (dtype and shape)."""
    n = len(values)
    if spec.name in MASK_NAMES:
        flat = np.asarray(values).reshape(n)
        if n and (flat.min() < 0 or flat.max() > 1):
            bad = flat[(flat < 0) | (flat > 1)][0]
            raise UserError(f"feature '{owner}/{spec.name}': a mask holds 0 or 1, found {bad}")
        return flat.astype(np.int8)
    if layout == "graphstorm" and spec.name not in labels:
        return np.asarray(values, dtype=np.float32).reshape(n, spec.width)
    dtype = np.float32 if spec.kind == "float" else np.int64
    values = np.asarray(values).astype(dtype, copy=False)
    return values.reshape((n, *spec.shape)) if spec.shape else values.reshape(n)


def raw_id_table(node_ids: pa.Table, ntype: str) -> pa.Table:
    """GraphStorm's raw id mapping of a node id table (`#id`, `orig_id`, ...): `orig` (the id
    as a UTF-8 string) and `new` (the original type-wise id, int64)."""
    raw = node_ids.column("#id")
    try:
        orig = raw.cast(pa.string())
    except pa.ArrowInvalid:
        raise UserError(
            f"node set '{ntype}': --layout graphstorm writes ids as strings, but an id is "
            "not valid UTF-8"
        ) from None
    return pa.table({"orig": orig, "new": node_ids.column("orig_id").cast(pa.int64())})


def raw_id_path(output_dir: str, ntype: str, shard: int) -> str:
    return f"{output_dir.rstrip('/')}/{RAW_ID_DIR}/{ntype}/part-{shard:05d}.parquet"
