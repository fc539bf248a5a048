"""Build of the animegan extension over the library `make` built (build/libanimegan.a).

The extension links the static library into itself, so the installed module needs only the
system libraries libanimegan uses (libvips, oneDNN, ...), not the repository. The repository
is this file's parent directory (or $ANIMEGAN_ROOT); $ANIMEGAN_BUILD names its build
directory (default build, e.g. build/address for the sanitizer build).
"""

import glob
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("ANIMEGAN_ROOT", os.path.dirname(HERE))
BUILD = os.path.join(ROOT, os.environ.get("ANIMEGAN_BUILD", "build"))
LIBRARY = os.path.join(BUILD, "libanimegan.a")

# The libraries the Makefile links (LINK_PKGS), the same names.
LINK_PKGS = ["vips", "libpng", "libjpeg", "libwebp", "libwebpdemux", "libwebpmux", "libexif",
             "libzip", "libcjson"]


def pkg_config(*args):
    out = subprocess.run(["pkg-config", *args, *LINK_PKGS], check=True, capture_output=True,
                         text=True).stdout
    return shlex.split(out)


if not os.path.exists(LIBRARY) and not {"sdist", "egg_info", "dist_info"} & set(sys.argv):
    sys.exit(f"animegan: {LIBRARY} is missing: run `make` in {ROOT} first")


def bundle_models():
    """The repository's models/ (weights with their README and licences) go into the package,
    so that an installed module finds the bundled styles and the face networks by name."""
    dest = os.path.join(HERE, "animegan", "models")
    os.makedirs(dest, exist_ok=True)
    for path in glob.glob(os.path.join(ROOT, "models", "*")):
        if os.path.isfile(path):
            shutil.copy2(path, dest)


bundle_models()

core = Extension(
    "animegan._core",
    sources=["animegan/_core.c"],
    include_dirs=[os.path.join(ROOT, "include")],
    define_macros=[("Py_LIMITED_API", "0x030B0000")],
    extra_compile_args=["-std=c11", "-Wall", "-Wextra", "-Werror", "-fopenmp"],
    extra_objects=[LIBRARY],
    extra_link_args=["-fopenmp", "-pthread", *pkg_config("--libs"), "-ldnnl", "-lm",
                     # The library's symbols stay inside the extension (no clash with another
                     # copy of libvips' or oneDNN's users in the same interpreter).
                     "-Wl,--exclude-libs,ALL"],
    py_limited_api=True,
)

setup(ext_modules=[core])
