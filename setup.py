"""Builds the `edgevit` extension module with the project's CMake (target edgevit_python) for pip.

Configures the whole project into build-python/cmake (tests off, the Python module on, for this
interpreter), builds only edgevit_python and copies the module where setuptools packs it. Extra CMake
arguments: EDGEVIT_CMAKE_ARGS, e.g. EDGEVIT_CMAKE_ARGS="-DEDGEVIT_CUDA=OFF" for a CPU-only module
(the default, EDGEVIT_CUDA=AUTO, builds the CUDA backend when nvcc is found). See pyproject.toml for the
offline install command.
"""
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = ROOT / "build-python" / "cmake"
        args = ["cmake", "-S", str(ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                "-DEDGEVIT_TESTS=OFF", "-DEDGEVIT_PYTHON=ON", f"-DPython3_EXECUTABLE={sys.executable}"]
        if shutil.which("ccache"):
            args += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", "-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache"]
        args += shlex.split(os.environ.get("EDGEVIT_CMAKE_ARGS", ""))
        subprocess.check_call(args)
        subprocess.check_call(["cmake", "--build", str(build_dir), "--target", "edgevit_python",
                               "-j", str(os.cpu_count() or 1)])
        built = sorted((build_dir / "python").glob("edgevit*.so"))
        if len(built) != 1:
            raise RuntimeError(f"expected one edgevit*.so in {build_dir / 'python'}, found {built}")
        dest = Path(self.get_ext_fullpath(ext.name))
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[0], dest)


setup(
    packages=[],  # one extension module, no Python packages (the tree has folders setuptools would guess at)
    py_modules=[],
    ext_modules=[Extension("edgevit", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": "build-python"}},
    zip_safe=False,
)
