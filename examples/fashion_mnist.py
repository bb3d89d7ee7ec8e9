"""Fashion-MNIST as Debian's dataset-fashion-mnist installs it (/usr/share/datasets/fashion-mnist:
the four IDX files, gzip-compressed), read into numpy arrays. SIGNLION_FASHION_DIR names another
folder holding the same four files (a machine without the package: scripts/gpu_prepare.sh)."""
import gzip
import os

import numpy as np

FASHION_DIR = os.environ.get("SIGNLION_FASHION_DIR") or "/usr/share/datasets/fashion-mnist"


def read_idx(name):
    """One IDX file of FASHION_DIR (e.g. "train-images-idx3-ubyte.gz") as a uint8 array of its shape."""
    with gzip.open(os.path.join(FASHION_DIR, name)) as f:
        data = f.read()
    ndim = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)
