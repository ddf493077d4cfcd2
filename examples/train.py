"""A stand-in training script for the README's examples: prints a few steps and exits 0."""

from __future__ import annotations

import time


def main() -> None:
    for step in range(3):
        print(f"step {step}: loss {1.0 / (step + 1):.3f}", flush=True)
        time.sleep(0.2)


if __name__ == "__main__":
    main()
