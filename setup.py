"""Build of the compiled loops (nccl_logsift.accel._kernels, C) and of the grammar files' place in a wheel;
the package's metadata is in pyproject.toml.

The loops are optional: where no C compiler works the build says so and goes on, and the package runs their
pure-Python twins (nccl_logsift/accel/fallback.py: the same results, several times slower)."""

import shutil
import sys
from pathlib import Path
from typing import ClassVar

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

SOURCES = Path("nccl_logsift/accel/csrc")
NO_COMPILER = (
    "nccl-logsift: the compiled loops (nccl_logsift.accel._kernels) were not built ({reason}); the package"
    " will run their pure-Python versions, correct but several times slower. Install a C compiler and"
    " reinstall for full speed."
)


class BuildPy(build_py):
    """Ship ``grammars/`` inside the package as ``nccl_logsift/grammars`` (grammar/registry.py looks there
    in an installed package, and at the checkout's ``grammars/`` otherwise)."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # build_lib is not the package's place then
            return
        shutil.copytree("grammars", Path(self.build_lib) / "nccl_logsift" / "grammars", dirs_exist_ok=True)


class BuildExt(build_ext):
    """The loops are plain C11: optimised as far as the compiler goes, warnings on."""

    FLAGS: ClassVar[dict[str, list[str]]] = {
        "msvc": ["/O2", "/W3"],
        "unix": ["-std=c11", "-O3", "-Wall", "-Wno-unused-parameter"],
    }

    def run(self) -> None:
        try:
            super().run()
        except (
            Exception
        ) as error:  # no compiler at all (setting one up failed before any extension was tried)
            _warn(error)

    def build_extensions(self) -> None:
        flags = self.FLAGS.get(self.compiler.compiler_type, [])
        for extension in self.extensions:
            extension.extra_compile_args = flags
        super().build_extensions()

    def build_extension(self, extension: Extension) -> None:
        try:
            super().build_extension(extension)
        except Exception as error:  # a compiler that is missing or fails
            _warn(error)


def _warn(error: Exception) -> None:
    message = NO_COMPILER.format(reason=f"{type(error).__name__}: {error}")
    print(f"\n{'*' * 100}\n{message}\n{'*' * 100}\n", file=sys.stderr)


kernels = Extension(
    "nccl_logsift.accel._kernels",
    sources=sorted(str(path) for path in SOURCES.glob("*.c")),
    depends=sorted(str(path) for path in SOURCES.glob("*.h")),
    optional=True,
)

setup(ext_modules=[kernels], cmdclass={"build_py": BuildPy, "build_ext": BuildExt})
