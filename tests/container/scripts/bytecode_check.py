"""Import torch and Horovod, then count the modules imported from source that have no usable
bytecode in the image: a .pyc whose header (flags 0, then the source's mtime and size) matches,
which is what Python checks before it uses one. Prints `MODULES n WITHOUT-PYC m [first few]`."""

import importlib.util
import os
import sys

import horovod.torch  # noqa: F401
import torch  # noqa: F401


def usable(src: str) -> bool:
    try:
        with open(importlib.util.cache_from_source(src), "rb") as f:
            head = f.read(16)
    except OSError:
        return False
    st = os.stat(src)
    flags, mtime, size = (int.from_bytes(head[i : i + 4], "little") for i in (4, 8, 12))
    return flags == 0 and (mtime, size) == (int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF)


origins = [
    getattr(m.__spec__, "origin", None)
    for name, m in list(sys.modules.items())
    if name.split(".")[0] in ("torch", "horovod") and getattr(m, "__spec__", None) is not None
]
sources = [o for o in origins if o and o.endswith(".py")]
missing = [s for s in sources if not usable(s)]
print("MODULES", len(sources), "WITHOUT-PYC", len(missing), missing[:5])
