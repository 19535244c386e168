"""Build (once, cached) a command that renders a GGUF's chat template through llama.cpp's own
C++ path — what `llama-server --jinja` does for /v1/chat/completions and /apply-template.

llama-cpp-python's shared library holds llama.cpp's core, not its `common` code (the jinja
engine, chat.cpp); its Python side renders with jinja2. So this compiles
tests/export/llama_jinja_render.cpp with llama.cpp's common sources from the llama-cpp-python
sdist of the *installed* version (`pip download --no-binary`, PyPI), against the installed
libllama: the same llama.cpp commit as the tests' other llama.cpp checks. Measured on this 2-core
box: ~2.5 min of compiler CPU (≈ 3 min wall idle, up to 9 min while the box is busy), then cached
under ~/.cache/mens/llama-jinja-<version>/. Used by slow tests only.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).parent
DRIVER = HERE / "llama_jinja_render.cpp"
# common/ files chat.cpp needs (it reaches common.cpp, which reaches the samplers and spec)
COMMON = ["chat", "chat-auto-parser-generator", "chat-auto-parser-helpers", "chat-diff-analyzer",
          "chat-peg-parser", "peg-parser", "json-schema-to-grammar", "json-schema", "json", "log",
          "common", "unicode", "trie", "sampling", "fit", "speculative", "ngram-cache",
          "ngram-map", "ngram-mod", "reasoning-budget", "llguidance"]


class Unavailable(Exception):
    """Why the renderer cannot be built here (the test skips saying it)."""


def build(cache: Path | None = None) -> Path:
    import llama_cpp

    version = llama_cpp.__version__
    lib = Path(llama_cpp.__file__).parent / "lib"
    cache = cache or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "mens" / \
        f"llama-jinja-{version}"
    stamp = hashlib.sha256(DRIVER.read_bytes() + str(lib).encode()).hexdigest()[:12]
    exe = cache / f"render-{stamp}"
    if exe.is_file():
        return exe
    if not shutil.which("g++"):
        raise Unavailable("no g++ on this machine")
    src = cache / "src"
    if not (src / "src" / "llama-ext.h").is_file():
        _fetch(version, cache, src)
    t0 = time.time()
    obj = cache / "obj"
    obj.mkdir(parents=True, exist_ok=True)
    (obj / "build-info.cpp").write_text(
        (src / "common" / "build-info.cpp.in").read_text()
        .replace("@LLAMA_BUILD_NUMBER@", "0")
        .replace("@LLAMA_BUILD_COMMIT@", f"llama-cpp-python-{version}")
        .replace("@BUILD_COMPILER@", "g++").replace("@BUILD_TARGET@", "test"))
    units = [DRIVER, obj / "build-info.cpp", *sorted((src / "common" / "jinja").glob("*.cpp")),
             *sorted((src / "common" / "parsers").glob("*.cpp")),
             *[src / "common" / f"{n}.cpp" for n in COMMON]]
    inc = [f"-I{src / d}" for d in ("common", "include", "ggml/include", "vendor")]

    def compile_one(u: Path) -> Path:
        o = obj / (hashlib.sha256(str(u).encode() + u.read_bytes()).hexdigest()[:12] + ".o")
        if not o.is_file():
            p = subprocess.run(["g++", "-std=c++17", "-O1", "-c", *inc, str(u), "-o", f"{o}.tmp"],
                               capture_output=True, text=True)
            if p.returncode:
                raise Unavailable(f"g++ failed on {u.name}: {p.stderr[-800:]}")
            os.replace(f"{o}.tmp", o)
        return o

    with ThreadPoolExecutor(max_workers=2) as pool:
        objs = list(pool.map(compile_one, units))
    tmp = exe.with_suffix(".tmp")
    p = subprocess.run(["g++", *map(str, objs), "-o", str(tmp), f"-L{lib}", "-lllama", "-lggml",
                        "-lggml-base", f"-Wl,-rpath,{lib}"], capture_output=True, text=True)
    if p.returncode:
        raise Unavailable(f"linking against {lib} failed: {p.stderr[-800:]}")
    os.replace(tmp, exe)
    print(f"\nllama.cpp jinja renderer built in {time.time() - t0:.0f} s: {exe}", file=sys.stderr)
    return exe


def _fetch(version: str, cache: Path, src: Path) -> None:
    """llama.cpp's common/, include/ and vendored headers from the llama-cpp-python sdist."""
    dl = cache / "sdist"
    p = subprocess.run([sys.executable, "-m", "pip", "download", f"llama-cpp-python=={version}",
                        "--no-binary", ":all:", "--no-deps", "-d", str(dl)],
                       capture_output=True, text=True, timeout=900)
    tars = sorted(dl.glob("llama_cpp_python-*.tar.gz"))
    if not tars:
        raise Unavailable(f"the llama-cpp-python {version} sdist could not be downloaded "
                          f"(pip: {p.stderr.strip()[-300:]})")
    want = ("common/", "include/", "ggml/include/", "vendor/nlohmann/")
    tmp = src.with_suffix(".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(tars[0]) as tf:
        for m in tf.getmembers():
            rel = m.name.split("/vendor/llama.cpp/", 1)
            hdr = rel[-1].startswith("src/") and rel[-1].endswith(".h")   # fit.cpp: llama-ext.h
            if len(rel) == 2 and (rel[1].startswith(want) or hdr) and (m.isfile() or m.isdir()):
                m.name = rel[1]
                tf.extract(m, tmp, filter="data")
    os.replace(tmp, src)


def render(exe: Path, gguf: Path, request: dict) -> str:
    import json
    p = subprocess.run([str(exe), str(gguf)], input=json.dumps(request), capture_output=True,
                       text=True, timeout=60)
    if p.returncode:
        raise RuntimeError(f"llama.cpp refused the request: {p.stderr.strip()}")
    return p.stdout
