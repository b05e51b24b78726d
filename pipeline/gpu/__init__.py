"""CUDA side: CuPy access, streams and events, kernel launch helpers. Only this package and the filters import CuPy."""
