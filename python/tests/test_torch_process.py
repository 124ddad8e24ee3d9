"""The package inside a process that has torch loaded, on an empty kernel cache: the first JIT compile
there is where a second C++ runtime in the process would crash (a library linked with its own static
libstdc++ next to the one torch loads; the build refuses to produce one, cmake/check_cxx_runtime.cmake).
NVRTC needs no GPU, so this runs in CI on a CPU torch: the venv's own, else the Linux distribution's
(Debian's python3-torch, which tools/install_deps.sh installs) when its extension fits this interpreter.
Each check runs in a fresh interpreter, so torch is loaded before the package as in an engine."""
import os
import subprocess
import sys
import sysconfig
import textwrap

import pytest

DISTRIBUTION_SITE = "/usr/lib/python3/dist-packages"

CHILD = textwrap.dedent("""
    import os, sys
    import torch  # first, as in an engine: torch's C++ runtime is the process's
    import flash_indexer as fi

    fi.set_cache_directory(sys.argv[1])
    fi.warm_topk("float32", arch="sm_90a")  # NVRTC compiles into the empty cache, in this process
    fi.warm_mqa_logits(64, 128, arch="sm_90a")
    cubins = [f for _, _, files in os.walk(sys.argv[1]) for f in files if f.endswith(".cubin")]
    assert cubins, "the warm calls wrote no kernel into the cache"

    runtimes = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "libstdc++" in os.path.basename(path):
                runtimes.add(os.path.realpath(path))
    assert len(runtimes) <= 1, f"more than one C++ runtime mapped: {sorted(runtimes)}"
    print(f"ok torch {torch.__version__}, {len(cubins)} kernels, C++ runtime {sorted(runtimes)}")
""")


def _torch_environment():
    """The environment under which a fresh interpreter imports torch, or None where no torch fits it."""
    env = dict(os.environ)
    probe = [sys.executable, "-c", "import torch"]
    if subprocess.run(probe, env=env, capture_output=True).returncode == 0:
        return env
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    if not os.path.exists(os.path.join(DISTRIBUTION_SITE, "torch", "_C" + suffix)):
        return None
    env["PYTHONPATH"] = os.pathsep.join(p for p in (DISTRIBUTION_SITE, env.get("PYTHONPATH")) if p)
    return env if subprocess.run(probe, env=env, capture_output=True).returncode == 0 else None


def test_first_jit_compile_in_a_torch_process(tmp_path):
    env = _torch_environment()
    if env is None:
        pytest.skip("no torch importable by this interpreter (pip's torch, or the distribution's python3-torch)")
    env.pop("FLASH_INDEXER_CACHE_DIR", None)
    cache = tmp_path / "kernels"
    child = subprocess.run([sys.executable, "-c", CHILD, str(cache)], env=env, capture_output=True, text=True,
                           timeout=600)
    assert child.returncode == 0, f"exit {child.returncode}\n{child.stdout}\n{child.stderr}"
    assert child.stdout.startswith("ok torch"), child.stdout
