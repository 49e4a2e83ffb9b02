"""Private mariadbd source/replica pairs on loopback ports, for tests, benchmarks and the demo."""

from lagd.sandbox.config import SandboxConfig
from lagd.sandbox.pair import Sandbox

__all__ = ["Sandbox", "SandboxConfig"]
