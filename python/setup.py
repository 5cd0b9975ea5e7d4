"""Builds sluice._core by running CMake on the repository (the folder above this one) and
installs it with the pure-Python package. Offline: every dependency comes from Debian
packages (scripts/install-deps.sh). Install with

    /usr/bin/python3 -m pip install --no-build-isolation --break-system-packages ./python

Environment: SLUICE_SOURCE_DIR (the repository, default: the parent of this folder),
SLUICE_CMAKE_BUILD_DIR (reuse an existing CMake build folder instead of a fresh one, e.g.
build/), SLUICE_CMAKE_ARGS (extra CMake arguments), CMAKE_BUILD_PARALLEL_LEVEL (build jobs).
"""
import os
import pathlib
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = pathlib.Path(__file__).resolve().parent


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        source = pathlib.Path(os.environ.get("SLUICE_SOURCE_DIR", HERE.parent)).resolve()
        if not (source / "CMakeLists.txt").exists():
            raise RuntimeError(f"{source} is not the Sluice repository (set SLUICE_SOURCE_DIR)")
        reuse = os.environ.get("SLUICE_CMAKE_BUILD_DIR")
        if reuse:
            build = pathlib.Path(reuse).resolve()
            configure = ["cmake", "-S", str(source), "-B", str(build)]
        else:
            build = pathlib.Path(self.build_temp).resolve() / "cmake"
            configure = ["cmake", "-S", str(source), "-B", str(build),
                         "-DCMAKE_BUILD_TYPE=Release", "-DSLUICE_BUILD_TESTS=OFF",
                         f"-DPython3_EXECUTABLE={sys.executable}"]
            if shutil.which("ninja"):
                configure += ["-G", "Ninja"]
        build.mkdir(parents=True, exist_ok=True)
        configure += os.environ.get("SLUICE_CMAKE_ARGS", "").split()
        subprocess.run(configure, check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        subprocess.run(["cmake", "--build", str(build), "--target", "sluice_python", "-j", jobs],
                       check=True)
        built = sorted((build / "python" / "sluice").glob("_core*.so"))
        if not built:
            raise RuntimeError("the CMake build made no _core module: is pybind11-dev installed?")
        target = pathlib.Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[0], target)


setup(ext_modules=[CMakeExtension("sluice._core")], cmdclass={"build_ext": CMakeBuild})
