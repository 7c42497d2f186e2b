"""The SDK's one compiled part; everything else (metadata, packages) is in pyproject.toml.

``txmq._codec_c`` (src/txmq/_codec.c, no dependencies beyond Python's headers) is
optional: when it cannot be built the install goes on and ``txmq.codec_native`` falls
back to the pure-Python ``txmq._codec_py``.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("txmq._codec_c", ["src/txmq/_codec.c"], optional=True, extra_compile_args=["-O3"]),
    ]
)
