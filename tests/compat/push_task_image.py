#!/usr/bin/env python3
"""Build the SWE-bench-shaped task image of images.test.mjs (tests/integration/oci.py) and push it
to the registry given as argv[1] (host:port, plain HTTP). Prints the reference."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import oci  # noqa: E402
from oci import D, F  # noqa: E402


def main():
    host = sys.argv[1]
    py = oci.base_layer(python=True)
    pkg = oci.layer_tar([
        D("testbed"), D("testbed/calc"),
        F("testbed/calc/__init__.py", "def add(a, b):\n    return a + b\n"),
        D("testbed/tests"), F("testbed/tests/__init__.py", ""),
        F("testbed/tests/test_calc.py",
          "import unittest\nfrom calc import add\n\n"
          "class T(unittest.TestCase):\n"
          "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"),
        D("tests"),
        F("tests/test.sh",
          "#!/bin/sh\ncd /testbed\nif python3 -c 'import pytest' 2>/dev/null; then\n"
          "  exec python3 -m pytest -q tests\nfi\nexec python3 -m unittest -v tests.test_calc\n",
          mode=0o755),
    ])
    d = tempfile.mkdtemp(prefix="corral-compat-image-")
    oci.write_layout(d, [py, pkg], config={"WorkingDir": "/testbed",
                                            "Env": ["PATH=/usr/bin:/bin", "TASK=calc-1"]})
    reg = oci.Registry.__new__(oci.Registry)  # push only: the registry is run.sh's
    reg.host, reg.user = host, None
    print(reg.push(d, "swebench/sweb.eval.x86_64.calc__calc-1", "latest"))
    oci.shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
