"""What a PyTorch peer of bench/run.sh actually runs: its BLAS library, that library's kernel
(the core type OpenBLAS chose for this CPU) and threads, and whether PyTorch's oneDNN (mkldnn)
path is on. bench/run.sh prints it once per peer so that every row says how the peer was
configured (bench/README.md, "How the peers are configured").

  python3 peer_info.py        prints one line: PEER torch=<version> blas=<library> ...
"""
import ctypes
import os

import torch


def loaded_blas():
    """The path of the BLAS library mapped into this process (after torch has loaded it)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            name = os.path.basename(path)
            if "openblas" in name or name.startswith(("libblas", "libmkl_rt", "libblis")):
                return path
    return None


def describe():
    # A matmul makes torch load its BLAS.
    torch.ones(64, 64) @ torch.ones(64, 64)
    fields = [f"torch={torch.__version__}", f"torch_threads={torch.get_num_threads()}",
              f"mkldnn={'on' if torch.backends.mkldnn.is_available() else 'off'}"]
    path = loaded_blas()
    fields.append(f"blas={os.path.realpath(path) if path else 'none'}")
    if path:
        lib = ctypes.CDLL(path)
        if hasattr(lib, "openblas_get_corename"):
            lib.openblas_get_corename.restype = ctypes.c_char_p
            fields.append(f"blas_kernel={lib.openblas_get_corename().decode()}")
            fields.append(f"blas_threads={lib.openblas_get_num_threads()}")
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS"):
        fields.append(f"{var}={os.environ.get(var, 'unset')}")
    return " ".join(fields)


if __name__ == "__main__":
    print("PEER " + describe())
