#!/usr/bin/env bash
# The library folders of the Python environment's NVIDIA wheels (nvidia/cu13/lib, nvidia/cublas/lib,
# nvidia/cudnn/lib, ...) that hold libcublas, libcublasLt or libcudnn (the cuDNN attention path), ':'-separated on one line (empty when there is no such
# environment). tests/gpu/check.sh exports them as MOE_CUDA_LIB_DIRS, where the engine's cuBLAS
# loader looks after the toolkit's folder (kernels/cuda/runtime.cu OpenToolkitLibrary).
#   tests/gpu/wheel_lib_dirs.sh [python]
py=${1:-python3}
command -v "$py" >/dev/null || exit 0
"$py" - <<'PY' 2>/dev/null || true
import glob, os, site, sys
roots = []
try:
    import nvidia  # a namespace package: one folder per site-packages that has NVIDIA wheels
    roots += list(nvidia.__path__)
except ImportError:
    pass
for sp in site.getsitepackages() + [site.getusersitepackages()]:
    roots.append(os.path.join(sp, "nvidia"))
dirs = []
for root in roots:
    libs = glob.glob(os.path.join(root, "*", "lib", "libcublas*.so*")) + glob.glob(os.path.join(root, "*", "lib", "libcudnn.so*"))
    for lib in sorted(libs):
        d = os.path.dirname(os.path.realpath(lib))
        if d not in dirs:
            dirs.append(d)
print(":".join(dirs))
PY
