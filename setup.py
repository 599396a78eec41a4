"""Build of the compiled loops (nccl_logsift._kernels, C) and of the grammar files' place in a wheel; the
package's metadata is in pyproject.toml."""

import shutil
from pathlib import Path
from typing import ClassVar

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

SOURCES = Path("nccl_logsift/csrc")


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

    def build_extensions(self) -> None:
        flags = self.FLAGS.get(self.compiler.compiler_type, [])
        for extension in self.extensions:
            extension.extra_compile_args = flags
        super().build_extensions()


kernels = Extension(
    "nccl_logsift._kernels",
    sources=sorted(str(path) for path in SOURCES.glob("*.c")),
    depends=sorted(str(path) for path in SOURCES.glob("*.h")),
)

setup(ext_modules=[kernels], cmdclass={"build_py": BuildPy, "build_ext": BuildExt})
